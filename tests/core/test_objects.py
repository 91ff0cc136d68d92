"""The hot objects are built positionally on the allocation path (ledger.allocate,
partition._ask_from, the SI adapter's AddAsk): their leading fields must keep this order."""

from dataclasses import fields

from partition_worker.core.commands import AddAsk
from partition_worker.core.objects import Allocation, Ask

ALLOCATION_ORDER = ["uuid", "key", "app_id", "node_id", "resource", "priority", "create_time_ns",
                    "queue_path", "tags", "task_group", "placeholder", "originator", "recovered",
                    "timeout_at_ns", "allow_preempt_self", "allow_preemption"]
ASK_ORDER = ["key", "app_id", "resource", "max_allocations", "pending", "priority", "create_time_ns",
             "seq", "tags", "execution_timeout_ms", "placeholder", "task_group", "originator",
             "allow_preempt_self", "allow_preempt_other", "required_node", "selector", "allow_preemption",
             "constraints"]

ADD_ASK_ORDER = ["key", "app_id", "resource", "max_allocations", "priority", "execution_timeout_ms", "tags",
                 "task_group", "placeholder", "originator", "allow_preempt_self", "allow_preempt_other"]


def test_allocation_fields_built_positionally_keep_their_order():
    assert [f.name for f in fields(Allocation)][:len(ALLOCATION_ORDER)] == ALLOCATION_ORDER


def test_ask_fields_built_positionally_keep_their_order():
    assert [f.name for f in fields(Ask)][:len(ASK_ORDER)] == ASK_ORDER


def test_add_ask_fields_built_positionally_keep_their_order():
    assert [f.name for f in fields(AddAsk)] == ADD_ASK_ORDER
