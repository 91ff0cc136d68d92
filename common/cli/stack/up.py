"""``korral up``: start the whole local stack under supervisord and wait until it serves.

The stack is an embedded ``redis-server`` (unless ``--redis-url`` names one), one broker,
``--workers`` partition workers and one rmproxy, all children of one supervisord whose
config is rendered from ``deploy/supervisord.conf.tmpl`` into the state directory.

Contract:
- Refuses to start when the state directory's stack still runs, or when an address is
  taken or cannot be bound (the message names the flag).
- Returns only once Redis answers PING and rmproxy's ``/ws/v1/korral/ready`` answers 200
  with ``ready: true`` and ``workers >= --workers`` -- health checked, never slept.
  If that does not happen by ``--timeout``, or a process gives up (FATAL), it stops
  everything it started and prints the failing process's log tail.
- Prints where each process listens. With ``--detach`` it returns; otherwise it stays in
  the foreground until SIGINT/SIGTERM/SIGHUP and then stops everything (``korral down``).
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import os
import shlex
import signal
import subprocess
import sys
import time
import xmlrpc.client
from dataclasses import dataclass
from pathlib import Path
from string import Template

from common import netutil, security
from common.webui import check_ui_dir
from common.cli import invocation
from common.cli.stack.redis_server import RedisNotInstalled, find_redis_server, ping, redis_command
from common.cli.stack.security import (ADMIN_TOKEN_FILE, StackSecurity, ensure_admin_token, ensure_curve_keys,
                                      keys_dir, program_flags, validate_tls)
from common.cli.stack.down import (
    NoStack,
    ProcId,
    StackError,
    StackInfo,
    default_state_dir,
    live_children,
    load_stack,
    save_stack,
    stop_stack,
    supervisor_rpc,
    supervisord_from_pidfile,
)

__all__ = ["UpOptions", "configure", "run", "start_stack", "wait_ready", "deploy_dir", "render_config",
           "refuse_if_running"]

READY_PATH = "/ws/v1/korral/ready"
# A unix socket path must fit in sockaddr_un (108 bytes on Linux, NUL included).
MAX_SOCKET_PATH = 100


@dataclass(frozen=True, slots=True)
class UpOptions:
    """The resolved flags of ``korral up`` (addresses validated, ports chosen)."""

    state_dir: Path
    si_address: str
    rest_address: str
    workers: int
    redis_url: str | None
    redis_port: int
    broker_frontend: str
    broker_backend: str
    log_level: str
    timeout: float
    security: StackSecurity = StackSecurity()
    ui_dir: str = ""  # a web UI rmproxy serves at / ("": Korral's dashboard)


def _env(name: str, default: str | None) -> str | None:
    return os.environ.get(name, default)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state-dir", default=default_state_dir(),
                        help="directory for the generated config, stack.json, logs and Redis data "
                             "[$KORRAL_STATE_DIR, .korral]")
    parser.add_argument("--si-address", default=_env("KORRAL_SI_ADDRESS", "127.0.0.1:9090"),
                        help="HOST:PORT of the gRPC SI service [$KORRAL_SI_ADDRESS, 127.0.0.1:9090]")
    parser.add_argument("--rest-address", default=_env("KORRAL_REST_ADDRESS", "127.0.0.1:9080"),
                        help="HOST:PORT of the REST API [$KORRAL_REST_ADDRESS, 127.0.0.1:9080]")
    parser.add_argument("--workers", type=int, default=_env("KORRAL_WORKERS", "2"),
                        help="number of partition workers [$KORRAL_WORKERS, 2]")
    parser.add_argument("--redis-url", default=_env("KORRAL_REDIS_URL", None),
                        help="use this external Redis instead of starting one [$KORRAL_REDIS_URL, embedded]")
    parser.add_argument("--redis-port", type=int, default=_env("KORRAL_REDIS_PORT", "0"),
                        help="port of the embedded Redis on 127.0.0.1 [$KORRAL_REDIS_PORT, a free port]")
    parser.add_argument("--broker-frontend", default=_env("KORRAL_BROKER_FRONTEND", None),
                        help="ZeroMQ endpoint rmproxies connect to [$KORRAL_BROKER_FRONTEND, tcp://127.0.0.1:<free>]")
    parser.add_argument("--broker-backend", default=_env("KORRAL_BROKER_BACKEND", None),
                        help="ZeroMQ endpoint workers connect to [$KORRAL_BROKER_BACKEND, tcp://127.0.0.1:<free>]")
    parser.add_argument("--log-level", default=_env("KORRAL_LOG_LEVEL", "info"), type=str.lower,
                        choices=["debug", "info", "warning", "error"],
                        help="log level of every process, passed as $KORRAL_LOG_LEVEL [info]")
    parser.add_argument("--timeout", type=float, default=_env("KORRAL_UP_TIMEOUT", "60"),
                        help="seconds to wait for the stack to be ready [$KORRAL_UP_TIMEOUT, 60]")
    parser.add_argument("--detach", action="store_true",
                        help="return once ready and leave the stack running (stop it with `korral down`)")
    parser.add_argument("--curve", action="store_true", default=_env("KORRAL_UP_CURVE", "") == "1",
                        help="CURVE-encrypt and authenticate the broker's links: key pairs for the broker, "
                             "rmproxy and workers are made in STATE_DIR/keys (kept across restarts) and the "
                             "broker accepts only those [$KORRAL_UP_CURVE=1]")
    parser.add_argument("--ui-dir", default=_env("KORRAL_UI_DIR", ""),
                        help="a built web UI (e.g. YuniKorn's) for rmproxy to serve at / on the REST address, "
                             "with Korral's dashboard at /ui/ [$KORRAL_UI_DIR, Korral's dashboard at /]")
    security.add_tls_flags(parser)


def resolve_options(args: argparse.Namespace) -> UpOptions:
    """Validate the flags and pick free ports; ``StackError`` names the flag at fault."""
    try:
        si = netutil.parse_host_port(args.si_address, "--si-address")
        rest = netutil.parse_host_port(args.rest_address, "--rest-address")
        if args.workers < 1:
            raise StackError(f"--workers must be at least 1, got {args.workers}")
        if not 0 <= args.redis_port <= 65535:
            raise StackError(f"--redis-port {args.redis_port} is not a port (0 = pick a free one)")
        if args.timeout <= 0:
            raise StackError(f"--timeout must be positive, got {args.timeout:g}")
        given = [si[1], rest[1], args.redis_port]
        for flag, endpoint in (("--broker-frontend", args.broker_frontend), ("--broker-backend", args.broker_backend)):
            if endpoint:
                given.append(netutil.parse_tcp_endpoint(endpoint, flag)[1])
        # Chosen ports must differ from the given ones, which are free but not yet bound.
        picked = iter(netutil.free_ports(3, exclude=given))
        frontend = args.broker_frontend or f"tcp://127.0.0.1:{next(picked)}"
        backend = args.broker_backend or f"tcp://127.0.0.1:{next(picked)}"
        fe = netutil.parse_tcp_endpoint(frontend, "--broker-frontend")
        be = netutil.parse_tcp_endpoint(backend, "--broker-backend")
        redis_port = 0 if args.redis_url else (args.redis_port or next(picked))
    except netutil.AddressError as exc:
        raise StackError(str(exc)) from None
    wanted = {"--si-address": si, "--rest-address": rest, "--broker-frontend": fe, "--broker-backend": be}
    if redis_port:
        wanted["--redis-port"] = ("127.0.0.1", redis_port)
    seen: dict[int, str] = {}
    for flag, (host, port) in wanted.items():
        if port in seen:
            raise StackError(f"{flag} and {seen[port]} both use port {port}")
        seen[port] = flag
        problem = netutil.bind_error(host, port)
        if problem is not None:
            raise StackError(f"{flag}: cannot listen on {host}:{port}: {problem}")
    try:
        tls = validate_tls(args.tls_cert, args.tls_key, args.tls_client_ca)
    except security.SecurityError as exc:
        raise StackError(str(exc)) from None
    try:
        ui_dir = str(check_ui_dir(args.ui_dir)) if args.ui_dir else ""
    except ValueError as exc:
        raise StackError(str(exc)) from None
    state_dir = Path(args.state_dir).resolve()
    if "%" in str(state_dir):
        # supervisord expands some path options twice, so no escaping of '%' survives in all of them.
        raise StackError(f"--state-dir {state_dir}: a path with '%' cannot be used by supervisord")
    return UpOptions(
        state_dir=state_dir,
        si_address=args.si_address, rest_address=args.rest_address, workers=args.workers,
        redis_url=args.redis_url, redis_port=redis_port,
        broker_frontend=frontend, broker_backend=backend,
        log_level=args.log_level, timeout=args.timeout,
        security=StackSecurity(args.curve, *tls), ui_dir=ui_dir,
    )


def deploy_dir() -> Path:
    """Where the supervisord templates live: ``$KORRAL_DEPLOY_DIR`` or ``deploy/`` of the source tree."""
    explicit = os.environ.get("KORRAL_DEPLOY_DIR")
    path = Path(explicit) if explicit else Path(__file__).resolve().parents[3] / "deploy"
    if not (path / "supervisord.conf.tmpl").is_file():
        raise StackError(f"supervisord template not found in {path}; set $KORRAL_DEPLOY_DIR to the "
                         f"directory holding supervisord.conf.tmpl (the repository's deploy/)")
    return path


def _socket_path(state_dir: Path) -> str:
    path = str(state_dir / "supervisor.sock")
    if len(path) <= MAX_SOCKET_PATH:
        return path
    digest = hashlib.sha1(str(state_dir).encode()).hexdigest()[:16]
    return f"/tmp/korral-{digest}.sock"


def _esc(value: object) -> str:
    """Escape for supervisord's %-interpolation: a literal '%' must be written '%%'."""
    return str(value).replace("%", "%%")


def render_config(opts: UpOptions, info: StackInfo, python: str = sys.executable) -> str:
    """The supervisord config of this stack, rendered from the ``deploy/`` templates."""
    templates = deploy_dir()
    redis_url = opts.redis_url or f"redis://127.0.0.1:{opts.redis_port}/0"
    values = {
        "socket": info.socket_path, "pidfile": info.pidfile, "logs_dir": info.logs_dir,
        "state_dir": str(opts.state_dir), "log_level": opts.log_level,
        "python": shlex.quote(python), "workers": opts.workers,
        "si_address": opts.si_address, "rest_address": opts.rest_address,
        "broker_frontend": opts.broker_frontend, "broker_backend": opts.broker_backend,
        "redis_url": shlex.quote(redis_url), "redis_program": "",
        **{f"{name}_security": flags for name, flags in program_flags(opts.state_dir, opts.security).items()},
        "rmproxy_ui": f" --ui-dir {shlex.quote(opts.ui_dir)}" if opts.ui_dir else "",
    }
    if not opts.redis_url:
        redis_dir = opts.state_dir / "redis"
        argv = redis_command(opts.redis_port, redis_dir, persist=True)
        redis_values = {"redis_command": shlex.join(argv), "redis_dir": str(redis_dir),
                        "logs_dir": info.logs_dir}
        values["redis_program"] = _fill(templates / "redis.program.tmpl",
                                        {k: _esc(v) for k, v in redis_values.items()})
        escaped = {k: (_esc(v) if k != "redis_program" else v) for k, v in values.items()}
    else:
        escaped = {k: _esc(v) for k, v in values.items()}
    return _fill(templates / "supervisord.conf.tmpl", escaped)


def _fill(template: Path, values: dict[str, str]) -> str:
    try:
        return Template(template.read_text()).substitute(values)
    except (KeyError, ValueError) as exc:
        raise StackError(f"template {template} is broken: {exc!r} (placeholders are ${{name}}, "
                         f"known names: {', '.join(sorted(values))})") from None


def refuse_if_running(state_dir: Path) -> None:
    """``StackError`` when the state dir's stack still runs, naming its live processes: those
    supervisord runs now (a restarted program has a new pid, which ``stack.json`` does not hold),
    else, when supervisord is gone or does not answer, the recorded processes still alive."""
    try:
        old = load_stack(state_dir)
    except NoStack:
        return
    sup = old.supervisord if old.supervisord is not None and old.supervisord.alive() else None
    sup = sup or supervisord_from_pidfile(old)  # an earlier `korral up` stopped before recording it
    alive = {"supervisord": sup} if sup is not None and sup.alive() else {}
    children = live_children(old, timeout=3.0) if alive else {}
    alive.update(children or {name: p for name, p in old.processes.items() if p.alive()})
    if alive:
        listing = ", ".join(f"{name} pid {p.pid}" for name, p in sorted(alive.items()))
        raise StackError(f"a stack is already running in {state_dir} ({listing}); "
                         f"stop it first with `{invocation()} down --state-dir {shlex.quote(str(state_dir))}`")


def start_stack(opts: UpOptions) -> StackInfo:
    """Write the config and ``stack.json``, start supervisord, and return the stack record.

    The stack is not ready yet when this returns; see ``wait_ready``. The caller has
    checked ``refuse_if_running`` first, so a ``starting`` record in the dir is its own.
    """
    state_dir = opts.state_dir
    state_dir.mkdir(parents=True, exist_ok=True)
    if opts.redis_url:
        if not ping(opts.redis_url, timeout=2.0):
            raise StackError(f"--redis-url {opts.redis_url}: Redis does not answer PING")
    else:
        try:
            find_redis_server()
        except RedisNotInstalled as exc:
            raise StackError(str(exc)) from None
    logs = state_dir / "logs"
    logs.mkdir(exist_ok=True)
    (state_dir / "redis").mkdir(exist_ok=True)
    if opts.security.curve:
        ensure_curve_keys(state_dir)
    ensure_admin_token(state_dir)
    redis_url = opts.redis_url or f"redis://127.0.0.1:{opts.redis_port}/0"
    info = StackInfo(
        state_dir=str(state_dir), config_path=str(state_dir / "supervisord.conf"),
        socket_path=_socket_path(state_dir), pidfile=str(state_dir / "supervisord.pid"),
        logs_dir=str(logs), workers=opts.workers, redis_embedded=not opts.redis_url,
        addresses={"si": opts.si_address, "rest": opts.rest_address,
                   "broker_frontend": opts.broker_frontend, "broker_backend": opts.broker_backend,
                   "redis_url": redis_url},
        started_at=time.time(), security=opts.security.describe(),
    )
    for stale in (info.pidfile, info.socket_path):
        Path(stale).unlink(missing_ok=True)  # left by a stack that died without `korral down`
    Path(info.config_path).write_text(render_config(opts, info))
    save_stack(info)
    out_path = logs / "supervisord.out"
    with open(out_path, "ab") as out:
        # supervisord forks into the background (own session, so a terminal Ctrl-C reaches
        # only us and we stop it in order) and this first process exits.
        proc = subprocess.run([sys.executable, "-m", "supervisor.supervisord", "-c", info.config_path],
                              stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                              timeout=30, check=False)
    if proc.returncode != 0:
        raise StackError(f"supervisord did not start (exit {proc.returncode}):\n{_tail(out_path)}")
    deadline = time.monotonic() + 15.0
    while True:
        pid = _read_pid(info.pidfile)
        ident = ProcId.of(pid) if pid else None
        if ident is not None:
            info.supervisord = ident
            save_stack(info)
            break
        if time.monotonic() >= deadline:
            raise StackError(f"supervisord wrote no pid file {info.pidfile} within 15s:\n"
                             f"{_tail(Path(info.logs_dir) / 'supervisord.log')}")
        time.sleep(0.05)
    return info


def _read_pid(path: str) -> int | None:
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None


def _connect_url(address: str, path: str) -> str:
    from common.cli.target import connect_address

    return f"http://{connect_address(address)}{path}"


def _check_processes(info: StackInfo) -> None:
    """Raise ``StackError`` with the log tail when supervisord died or a program gave up (FATAL)."""
    if info.supervisord is None or not info.supervisord.alive():
        raise StackError("supervisord exited:\n" + _tail(Path(info.logs_dir) / "supervisord.log"))
    try:
        rows = supervisor_rpc(info).supervisor.getAllProcessInfo()
    except (OSError, xmlrpc.client.Error, http.client.HTTPException):
        return  # not answering yet; the deadline covers a supervisord that never answers
    for row in rows:
        if row["statename"] == "FATAL":
            raise StackError(f"{row['name']} keeps exiting and supervisord gave up "
                             f"({row.get('spawnerr') or 'see its log'}); "
                             f"last lines of {row['stdout_logfile']}:\n{_tail(row['stdout_logfile'])}")


def _not_running(info: StackInfo) -> str:
    """The programs that are not RUNNING, each with its log tail (for a timeout message)."""
    try:
        rows = supervisor_rpc(info).supervisor.getAllProcessInfo()
    except (OSError, xmlrpc.client.Error, http.client.HTTPException) as exc:
        return f"supervisord does not answer: {exc}"
    bad = [r for r in rows if r["statename"] != "RUNNING"]
    if not bad:
        rmproxy = Path(info.logs_dir) / "rmproxy.log"
        return f"every process runs; last lines of {rmproxy}:\n{_tail(rmproxy)}"
    return "\n".join(f"{r['name']} is {r['statename']}; last lines of {r['stdout_logfile']}:\n"
                     f"{_tail(r['stdout_logfile'])}" for r in bad)


def wait_ready(info: StackInfo, deadline: float) -> dict:
    """Block until Redis answers PING and rmproxy reports ready with every worker; return the ready JSON."""
    check_every, next_check = 0.5, 0.0
    redis_url = info.addresses["redis_url"]
    while not ping(redis_url, timeout=0.5):
        _check_processes(info)
        if time.monotonic() >= deadline:
            raise StackError(f"Redis at {redis_url} does not answer PING\n{_not_running(info)}")
        time.sleep(0.05)

    def on_poll(_answer: netutil.HttpAnswer | None) -> None:
        nonlocal next_check
        if time.monotonic() >= next_check:
            next_check = time.monotonic() + check_every
            _check_processes(info)

    def accept(answer: netutil.HttpAnswer) -> bool:
        body = answer.body if isinstance(answer.body, dict) else {}
        return (answer.status == 200 and body.get("ready") is True
                and int(body.get("workers") or 0) >= info.workers)

    url = _connect_url(info.addresses["rest"], READY_PATH)
    try:
        return netutil.wait_for_http(url, deadline, accept, on_poll=on_poll).body
    except netutil.WaitTimeout as exc:
        raise StackError(f"the stack was not ready in time: {exc}\n{_not_running(info)}") from None


def _tail(path: str | os.PathLike, lines: int = 15) -> str:
    try:
        text = Path(path).read_text(errors="replace").splitlines()[-lines:]
    except OSError as exc:
        return f"  (no log: {exc})"
    return "\n".join("  | " + line for line in text) or "  (log is empty)"


def _summary(info: StackInfo, ready: dict) -> str:
    a = info.addresses
    redis_kind = "embedded" if info.redis_embedded else "external"
    workers = sorted(n for n in info.processes if n.startswith("worker-"))
    rows = [
        ("SI (gRPC)", a["si"], f"rmproxy pid {_pid(info, 'rmproxy')}"),
        ("REST", f"http://{a['rest']}/ws/v1", "ready: " + _ready_text(ready)),
        ("broker frontend", a["broker_frontend"], f"broker pid {_pid(info, 'broker')}"),
        ("broker backend", a["broker_backend"],
         ", ".join(f"{w} pid {info.processes[w].pid}" for w in workers) or "-"),
        ("Redis", a["redis_url"], f"{redis_kind}" + (f", pid {_pid(info, 'redis')}" if info.redis_embedded else "")),
        ("state dir", info.state_dir, f"logs in {info.logs_dir}"),
        ("security", info.security, f"keys in {keys_dir(Path(info.state_dir))}" if "CURVE" in info.security else "-"),
        ("admin token", str(Path(info.state_dir) / ADMIN_TOKEN_FILE),
         f"{invocation()} config get --state-dir {shlex.quote(info.state_dir)}"),
    ]
    width = max(len(r[0]) for r in rows)
    lines = [f"Korral is up ({info.workers} workers, supervisord pid {info.supervisord.pid if info.supervisord else '?'}):"]
    lines += [f"  {name:<{width}}  {where}   ({what})" for name, where, what in rows]
    return "\n".join(lines)


def _pid(info: StackInfo, name: str) -> str:
    proc = info.processes.get(name)
    return str(proc.pid) if proc else "?"


def _ready_text(ready: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in ready.items()) if isinstance(ready, dict) else str(ready)


def _teardown(state_dir: Path) -> None:
    try:
        info = load_stack(state_dir)
    except NoStack:
        return
    if info.supervisord is None and supervisord_from_pidfile(info) is not None:
        # stopped while supervisord was starting: give its daemon time to write the pid file,
        # so the daemon (not the launching process it forks from) is the one stopped
        deadline = time.monotonic() + 3.0
        while not Path(info.pidfile).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    try:
        report = stop_stack(state_dir, timeout=15.0)
    except NoStack:
        return
    if report.left:
        print(f"korral up: could not stop {', '.join(report.left)}", file=sys.stderr)


class _Stop(Exception):
    """A stop signal arrived."""


def _raise_stop(signum: int, _frame: object) -> None:
    raise _Stop(signal.Signals(signum).name)


def _ignore_stop_signals() -> None:
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)


def run(args: argparse.Namespace) -> int:
    """Exit 0 after a detached start or a signalled foreground stop; 1 when the stack could not start."""
    try:
        refuse_if_running(Path(args.state_dir).resolve())  # first: its ports are taken by design
        opts = resolve_options(args)
    except StackError as exc:
        print(f"korral up: {exc}", file=sys.stderr)
        return 1
    # From here on any stop signal (Ctrl-C included) unwinds into the teardown below.
    previous = {s: signal.signal(s, _raise_stop) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    started = ready_seen = False
    try:
        info = start_stack(opts)
        started = True
        ready = wait_ready(info, time.monotonic() + opts.timeout)
        ready_seen = True
        info.processes = live_children(info)
        info.state = "running"
        save_stack(info)
        print(_summary(info, ready), flush=True)
        if args.detach:
            print(f"stop it with: {invocation()} down --state-dir {shlex.quote(str(info.state_dir))}", flush=True)
            return 0
        print("running in the foreground; Ctrl-C stops the whole stack", flush=True)
        while info.supervisord is not None and info.supervisord.alive():
            time.sleep(0.2)
        if _recorded_state(opts.state_dir) in ("stopping", "stopped"):
            print("korral up: the stack was stopped by `korral down`", file=sys.stderr)
            return 0
        print("korral up: supervisord exited; stopping what is left", file=sys.stderr)
        _teardown(opts.state_dir)
        return 1
    except _Stop as stop:
        print(f"korral up: {stop}: stopping the stack in {opts.state_dir}", file=sys.stderr, flush=True)
        _ignore_stop_signals()  # a second Ctrl-C must not abort the teardown
        if started or _has_own_stack(opts.state_dir):
            _teardown(opts.state_dir)
        print("korral up: stopped", file=sys.stderr)
        return 0 if ready_seen else 130
    except (StackError, OSError, subprocess.SubprocessError) as exc:
        print(f"korral up: {exc}", file=sys.stderr, flush=True)
        _ignore_stop_signals()
        if started or _has_own_stack(opts.state_dir):
            _teardown(opts.state_dir)
            print(f"korral up: stopped what had started; logs in {opts.state_dir / 'logs'}", file=sys.stderr)
        return 1
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _recorded_state(state_dir: Path) -> str | None:
    try:
        return load_stack(state_dir).state
    except StackError:
        return None


def _has_own_stack(state_dir: Path) -> bool:
    """True when the state dir holds a half-started record; after ``refuse_if_running`` it is ours."""
    try:
        info = load_stack(state_dir)
    except StackError:
        return False
    return info.state == "starting"
