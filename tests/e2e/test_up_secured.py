"""``korral up --curve --tls-*``: a whole local stack with CURVE between the broker and its
peers and (mutual) TLS on the gRPC front door, driven by ``korral sim`` over TLS."""

from __future__ import annotations

import subprocess
import sys

from rich.console import Console

from common import security
from simulator.presets import PRESETS
from simulator.runner import SimOptions, simulate
from simulator.workload import parse_workload, plan
from tests.conftest import korral_env, run_korral, start_stack, stop_and_verify, wait_until
from tests.e2e.test_security import make_keys

QUIET = Console(file=open("/dev/null", "w"))


def test_a_secured_stack_schedules_over_tls_and_curve_and_refuses_unknown_peers(stack_factory, pki, tmp_path):
    tls = ("--tls-cert", str(pki / "server.crt"), "--tls-key", str(pki / "server.key"),
           "--tls-client-ca", str(pki / "ca.crt"))
    stack = stack_factory(workers=1, extra=("--curve", *tls))
    assert "CURVE between the broker and its peers; mutual TLS" in stack.up_output
    keys = stack.state_dir / "keys"
    assert sorted(p.name for p in (keys / "allowed").iterdir()) == ["rmproxy.key", "worker.key"]
    assert (keys / "broker.key_secret").stat().st_mode & 0o077 == 0

    # an RM with a client certificate of the trusted CA runs the small workload end to end
    creds = security.grpc_channel_credentials(str(pki / "ca.crt"), str(pki / "rm.crt"), str(pki / "rm.key"))
    result = simulate(plan(parse_workload(PRESETS["small"][0])),
                      SimOptions(si_address=stack.si_address, progress=False, credentials=creds), QUIET)
    assert result.summary["violations"] == [] and result.summary["apps"] == {"Completed": 6}

    # a worker with a key the broker does not know is refused, and says so in the broker's log
    make_keys(tmp_path / "rogue", "rogue")
    rogue = subprocess.Popen(
        [sys.executable, "-m", "common.cli", "worker", "--broker", stack.broker_backend,
         "--redis-url", stack.redis_url, "--name", "rogue",
         "--curve-secret", str(tmp_path / "rogue" / "rogue.key_secret"),
         "--curve-server", str(keys / "broker.key")],
        env=korral_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        log = stack.state_dir / "logs" / "broker.log"
        wait_until(lambda: "refused a CURVE peer" in log.read_text(), 20, "the broker logging the refused worker",
                   interval=0.2)
    finally:
        rogue.terminate()
        rogue.wait(timeout=10)
    status = run_korral("status", "--state-dir", str(stack.state_dir))
    assert "rogue" not in status.stdout


def test_the_keys_survive_a_restart_and_bad_tls_flags_are_named(tmp_path, pki):
    state = tmp_path / "state"
    secrets = []
    for _ in range(2):  # up, down, up again in the same state dir: the same identities
        handle = start_stack(state, 1, ("--curve",))
        try:
            secrets.append((state / "keys" / "broker.key_secret").read_bytes())
        finally:
            assert stop_and_verify(handle) == []
    assert secrets[0] == secrets[1]
    bad = run_korral("up", "--detach", "--state-dir", str(tmp_path / "bad"), "--tls-cert", str(pki / "server.crt"))
    assert bad.returncode == 1 and "TLS needs both --tls-cert and --tls-key" in bad.stderr
    missing = run_korral("up", "--detach", "--state-dir", str(tmp_path / "bad"),
                         "--tls-cert", str(pki / "nope.crt"), "--tls-key", str(pki / "server.key"))
    assert missing.returncode == 1 and f"--tls-cert {pki / 'nope.crt'}" in missing.stderr
