"""``korral bench e2e --breakdown`` reads the worker's stage counters from the metrics text."""

from benchmarks.breakdown import parse_worker_stages

TEXT = """# HELP korral_worker_stage_seconds_total Worker time ...
# TYPE korral_worker_stage_seconds_total counter
korral_worker_stage_seconds_total{rm="bench",partition="default",worker="w0",stage="decode"} 0.5
korral_worker_stage_seconds_total{rm="bench",partition="gpu",worker="w1",stage="decode"} 0.25
korral_worker_stage_seconds_total{rm="bench",partition="default",worker="w0",stage="cycle"} 2.0
korral_worker_stage_seconds_total{rm="other",partition="default",worker="w2",stage="cycle"} 9.0
korral_partition_cycles_total{rm="bench",partition="default",worker="w0"} 7.0
"""


def test_stage_seconds_are_summed_over_the_rms_partitions_and_other_rms_ignored():
    assert parse_worker_stages(TEXT, "bench") == {"decode": 0.75, "cycle": 2.0}
    assert parse_worker_stages(TEXT, "nobody") == {}
