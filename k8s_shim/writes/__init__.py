"""The outbound writes to the API server, each with its retries and what each answer means:
bindings (``binding``), events (``events``), the ``PodScheduled`` condition (``conditions``),
and gang placeholder pods (``placeholders``). What the shim tells the scheduler is ``outbox``'s,
one level up.
"""
