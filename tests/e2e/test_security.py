"""Secured links on loopback: CURVE refuses a worker with an unknown key; mutual TLS refuses an RM without a client certificate.

Real processes (redis-server, korral broker, workers, rmproxy) on free loopback ports,
each stopped by its own pid at teardown. Certificates come from the ``openssl`` command
line (the ``cryptography`` package is not in the project's virtualenv).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from common import si_pb2, si_pb2_grpc
from common.netutil import free_ports, http_get_json
from tests.conftest import korral_env, run_korral, stop_process, wait_until

REPO = Path(__file__).resolve().parents[2]




class Stack:
    """Broker, rmproxy and workers as plain subprocesses on loopback, with a given Redis."""

    def __init__(self, tmp: Path, redis_url: str) -> None:
        self.tmp = tmp
        self.redis_url = redis_url
        fe, be, si, rest = free_ports(4)
        self.frontend, self.backend = f"tcp://127.0.0.1:{fe}", f"tcp://127.0.0.1:{be}"
        self.si, self.rest = f"127.0.0.1:{si}", f"127.0.0.1:{rest}"
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, *args: str) -> subprocess.Popen:
        log = open(self.tmp / f"{name}.log", "ab")
        try:
            proc = subprocess.Popen([sys.executable, "-m", "common.cli", *args], stdout=log, stderr=log,
                                    stdin=subprocess.DEVNULL, env=korral_env(), cwd=REPO, start_new_session=True)
        finally:
            log.close()
        self.procs[name] = proc
        return proc

    def broker(self, *extra: str) -> None:
        self.start("broker", "broker", "--frontend", self.frontend, "--backend", self.backend,
                   "--redis-url", self.redis_url, *extra)

    def worker(self, name: str, *extra: str) -> None:
        self.start(name, "worker", "--broker", self.backend, "--redis-url", self.redis_url, "--name", name, *extra)

    def rmproxy(self, *extra: str) -> None:
        self.start("rmproxy", "rmproxy", "--si-address", self.si, "--rest-address", self.rest,
                   "--broker", self.frontend, "--redis-url", self.redis_url, *extra)

    def curve_broker(self, keys: Path) -> None:
        """The broker with the key pair ``keys/broker``, allowing the keys in ``keys/allowed``."""
        self.broker("--curve-secret", str(keys / "broker.key_secret"), "--curve-allowed", str(keys / "allowed"))

    def wait_refused(self, public_key_file: Path, times: int = 1) -> str:
        """Until the broker has logged ``times`` refusals of the key (a refused peer keeps
        reconnecting, and each handshake is refused again); returns the key."""
        key = public_key(public_key_file)
        wait_until(lambda: self.log("broker").count(f"unknown public key {key}") >= times, 10,
                   f"the broker logging {times} refusal(s) of the key {key}", self.logs)
        return key

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")

    def logs(self) -> str:
        return "\n".join(f"--- {n} (exit {p.poll()}) ---\n" + "\n".join(self.log(n).splitlines()[-25:])
                         for n, p in self.procs.items())

    def workers(self) -> set[str]:
        body = http_get_json(f"http://{self.rest}/ws/v1/korral/stack").body or {}
        return {w["name"] for w in (body.get("cluster") or {}).get("workers", [])}

    def stop(self) -> list[str]:
        return [f"{name} pid {proc.pid} ignored SIGTERM (killed)"
                for name, proc in reversed(list(self.procs.items())) if stop_process(proc)]


@pytest.fixture
def stack(tmp_path, redis_server):
    s = Stack(tmp_path, redis_server.url)
    try:
        yield s
    finally:
        problems = s.stop()
    assert problems == []


# --- CURVE ---------------------------------------------------------------------------------------

def make_keys(out: Path, *names: str, allow: tuple[str, ...] = ()) -> Path:
    """CURVE key pairs ``names`` in ``out`` (``korral keys``), and the public keys of ``allow``
    copied into ``out/allowed`` (a broker's ``--curve-allowed`` directory); returns ``out``."""
    args = ["keys", "--out", str(out)]
    for n in names:
        args += ["--name", n]
    result = run_korral(*args)
    assert result.returncode == 0, result.stdout + result.stderr
    if allow:
        (out / "allowed").mkdir()
        for name in allow:
            shutil.copy(out / f"{name}.key", out / "allowed" / f"{name}.key")
    return out


def public_key(path: Path) -> str:
    import zmq.auth

    return zmq.auth.load_certificate(str(path))[0].decode()


def test_worker_with_unknown_curve_key_cannot_join(stack, tmp_path):
    keys, rogue = tmp_path / "keys", tmp_path / "rogue"
    make_keys(keys, "broker", "good", "rmproxy", allow=("good", "rmproxy"))
    make_keys(rogue, "intruder")  # a well-formed key pair the broker was never told about
    allowed = keys / "allowed"
    server = ("--curve-server", str(keys / "broker.key"))

    stack.curve_broker(keys)
    stack.rmproxy("--curve-secret", str(keys / "rmproxy.key_secret"), *server)
    stack.worker("good", "--curve-secret", str(keys / "good.key_secret"), *server)
    stack.worker("intruder", "--curve-secret", str(rogue / "intruder.key_secret"), *server)
    stack.worker("plaintext")  # no CURVE at all: the handshake cannot even start

    wait_until(lambda: "good" in stack.workers(), 20, "the worker with an allowed key joined", stack.logs)
    intruder_key = stack.wait_refused(rogue / "intruder.key")
    line = next(ln for ln in stack.log("broker").splitlines() if intruder_key in ln)
    assert "refused" in line and str(allowed) in line, line
    stack.wait_refused(rogue / "intruder.key", times=3)  # it kept trying, and never got in
    assert stack.workers() == {"good"}, stack.logs()
    assert stack.procs["good"].poll() is None and stack.procs["rmproxy"].poll() is None


def test_rmproxy_with_unknown_curve_key_is_refused_and_not_ready(stack, tmp_path):
    keys, rogue = tmp_path / "keys", tmp_path / "rogue"
    make_keys(keys, "broker", "worker", allow=("worker",))
    make_keys(rogue, "rmproxy")
    stack.curve_broker(keys)
    stack.rmproxy("--curve-secret", str(rogue / "rmproxy.key_secret"), "--curve-server", str(keys / "broker.key"))
    stack.wait_refused(rogue / "rmproxy.key")
    answer = wait_until(lambda: http_get_json(f"http://{stack.rest}/ws/v1/korral/ready"), 10, "rmproxy REST up", stack.logs)
    assert answer.status == 503 and answer.body["broker"] is False, answer
    assert stack.procs["rmproxy"].poll() is None, stack.log("rmproxy")


def test_refused_worker_stays_up_and_says_why(stack, tmp_path):
    keys, rogue = tmp_path / "keys", tmp_path / "rogue"
    make_keys(keys, "broker", "rmproxy", allow=("rmproxy",))
    make_keys(rogue, "intruder")
    stack.curve_broker(keys)
    stack.worker("intruder", "--curve-secret", str(rogue / "intruder.key_secret"),
                 "--curve-server", str(keys / "broker.key"))
    stack.wait_refused(rogue / "intruder.key", times=3)  # refused again and again, and still running
    assert stack.procs["intruder"].poll() is None, stack.log("intruder")
    assert "Traceback" not in stack.log("intruder")


def test_broker_refuses_bad_curve_settings(tmp_path, redis_server):
    """Misconfiguration fails at start with a message naming the flag, not at the first connection."""
    keys = tmp_path / "keys"
    make_keys(keys, "broker")
    fe, be = free_ports(2)
    base = ["broker", "--frontend", f"tcp://127.0.0.1:{fe}", "--backend", f"tcp://127.0.0.1:{be}",
            "--redis-url", redis_server.url]
    no_dir = run_korral(*base, "--curve-secret", str(keys / "broker.key_secret"), timeout=30)
    assert no_dir.returncode != 0 and "--curve-allowed" in no_dir.stderr, no_dir.stderr
    public_only = run_korral(*base, "--curve-secret", str(keys / "broker.key"), "--curve-allowed", str(keys),
                             timeout=30)
    assert public_only.returncode != 0 and "--curve-secret" in public_only.stderr, public_only.stderr


# --- mutual TLS for gRPC -----------------------------------------------------------------------

def register(address: str, credentials: grpc.ChannelCredentials | None, rm_id: str) -> None:
    channel = grpc.secure_channel(address, credentials) if credentials else grpc.insecure_channel(address)
    try:
        si_pb2_grpc.SchedulerStub(channel).RegisterResourceManager(
            si_pb2.RegisterResourceManagerRequest(rmID=rm_id, version="test", policyGroup="queues"), timeout=15)
    finally:
        channel.close()


def test_mutual_tls_refuses_rm_without_client_certificate(stack, pki):
    stack.broker()
    stack.worker("w1")
    stack.worker("w2")
    stack.rmproxy("--tls-cert", str(pki / "server.crt"), "--tls-key", str(pki / "server.key"),
                  "--tls-client-ca", str(pki / "ca.crt"))
    wait_until(lambda: http_get_json(f"http://{stack.rest}/ws/v1/korral/ready").body.get("ready"), 20,
               "rmproxy ready", stack.logs)
    ca = (pki / "ca.crt").read_bytes()

    # An RM holding a certificate of the trusted CA registers.
    good = grpc.ssl_channel_credentials(root_certificates=ca, private_key=(pki / "rm.key").read_bytes(),
                                        certificate_chain=(pki / "rm.crt").read_bytes())
    register(stack.si, good, "rm-with-cert")

    refused = {
        "no client certificate": grpc.ssl_channel_credentials(root_certificates=ca),
        "certificate of another CA": grpc.ssl_channel_credentials(
            root_certificates=ca, private_key=(pki / "stranger.key").read_bytes(),
            certificate_chain=(pki / "stranger.crt").read_bytes()),
        "plaintext": None,
    }
    for what, creds in refused.items():
        with pytest.raises(grpc.RpcError) as err:
            register(stack.si, creds, f"rm-{what.replace(' ', '-')}")
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE, (what, err.value)
    assert stack.procs["rmproxy"].poll() is None, stack.logs()


def test_tls_without_client_ca_accepts_any_rm_that_trusts_the_server(stack, pki):
    stack.broker()
    stack.worker("w1")
    stack.rmproxy("--tls-cert", str(pki / "server.crt"), "--tls-key", str(pki / "server.key"))
    wait_until(lambda: http_get_json(f"http://{stack.rest}/ws/v1/korral/ready").body.get("ready"), 20,
               "rmproxy ready", stack.logs)
    register(stack.si, grpc.ssl_channel_credentials(root_certificates=(pki / "ca.crt").read_bytes()), "rm-tls")
    # An RM that does not trust the server's CA refuses the server.
    with pytest.raises(grpc.RpcError) as err:
        register(stack.si, grpc.ssl_channel_credentials(root_certificates=(pki / "other-ca.crt").read_bytes()),
                 "rm-distrust")
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
