# Korral: `make demo` runs the main job, `make test` runs the tests. Both do all set-up
# on a fresh Debian machine with Python 3.11: .venv, `pip install -c constraints.txt -e '.[test]'`,
# redis-server, chromium (for the web UI tests, when root), nftables (the network-fault tests, when root). Set-up is idempotent; it reruns only
# when pyproject.toml, the constraints file or the CONSTRAINTS setting changes (stamp files in .venv).

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.ONESHELL:
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
KORRAL := $(PY) -m common.cli
STAMP := $(VENV)/.korral-setup-stamp
DEMO_DIR ?= .state/demo
DEMO_WORKERS ?= 3
PYTEST_ARGS ?=
KEEP ?= 0
# Exact versions to install (`make lock` writes them); empty: the newest versions pyproject.toml allows.
CONSTRAINTS ?= constraints.txt
LOCK_FILE := constraints.txt
# Which CONSTRAINTS the venv was set up with: rewritten only when that changes, so a change reruns set-up.
CONSTRAINTS_USED := $(VENV)/.korral-constraints-used
# make test-stress: the tests that run real processes (stacks from `korral up`, supervisord, workers
# against a real broker), STRESS_RUNS times in a row while a busy loop keeps one core busy.
STRESS_RUNS ?= 5
STRESS_TESTS ?= tests/e2e tests/stack tests/si_client/test_client_stack.py tests/simulator/test_sim_run.py \
  tests/rest tests/web tests/worker/test_liveness.py tests/deploy/test_supervisord.py tests/deploy/test_compose_run.py

.PHONY: help setup redis-server slapd chromium netfilter demo demo-k8s demo-k8s-pools test bench soak soak-net lock test-stress FORCE

help:
	@echo "make demo    set up, start the local stack, run the demo workload, print a summary, stop the stack"
	@echo "make demo-k8s  set up; Korral scheduling a fake Kubernetes cluster through korral k8s-shim: where each pod went, why any waits"
	@echo "make demo-k8s-pools  the same with two node pools as two partitions (korral k8s-shim --partition-label)"
	@echo "make test    set up and run the tests (not the slow soaks or benchmarks)"
	@echo "make bench   set up and run the benchmarks (korral bench compare, core --preemption, e2e, churn, recovery, k8s)"
	@echo "make soak    set up and run the slow soak tests (pytest -m slow)"
	@echo "make soak-net  set up and run the network-fault soak alone: 100 faults between network-namespace"
	@echo "             hosts under load (root; KORRAL_NETSOAK_FAULTS, KORRAL_NETSOAK_SEED, KORRAL_NETSOAK_REPORT)"
	@echo "make setup   only the set-up: .venv, pip install -c constraints.txt -e '.[test]', redis-server,"
	@echo "             slapd, chromium and nftables (as root; the LDAP, web UI and network-fault tests skip"
	@echo "             without them)"
	@echo "             (CONSTRAINTS= installs the newest versions pyproject.toml allows instead)"
	@echo "make lock    write constraints.txt: the exact versions installed in .venv (CONSTRAINTS= first upgrades)"
	@echo "make test-stress  run the end-to-end tests STRESS_RUNS times (default 5) with one core kept busy"

setup: $(STAMP) redis-server slapd chromium netfilter
	@# only `make setup` itself says it (make demo/test/... run set-up quietly on their way)
	if [ "$(MAKECMDGOALS)" = setup ]; then
	  echo 'set-up done; put korral on PATH with: export PATH="$(abspath $(VENV))/bin:$$PATH"  (or: source $(abspath $(VENV))/bin/activate)'
	fi

$(STAMP): pyproject.toml $(CONSTRAINTS) $(CONSTRAINTS_USED)
	@if ! $(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
	  echo "Korral needs Python >= 3.11 as '$(PYTHON)' (set PYTHON=/path/to/python3.11)" >&2; exit 1
	fi
	if [ ! -x "$(PY)" ]; then
	  if ! $(PYTHON) -m venv "$(VENV)"; then
	    rm -rf "$(VENV)"  # a half-made venv (no ensurepip) would fool the next run
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
	      apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y python3-venv
	      $(PYTHON) -m venv "$(VENV)"
	    else
	      echo "cannot create $(VENV): install the venv module (Debian: sudo apt-get install python3-venv)" >&2; exit 1
	    fi
	  fi
	fi
	if [ -n "$(CONSTRAINTS)" ]; then
	  $(PY) -m pip install --quiet -c "$(CONSTRAINTS)" -e '.[test]'
	else
	  $(PY) -m pip install --quiet --upgrade --upgrade-strategy eager -e '.[test]'
	fi
	touch "$(STAMP)"

$(CONSTRAINTS_USED): FORCE
	@mkdir -p "$(VENV)"
	if [ ! -f "$@" ] || [ "$$(cat "$@")" != "$(CONSTRAINTS)" ]; then printf '%s\n' "$(CONSTRAINTS)" > "$@"; fi

ifneq ($(strip $(CONSTRAINTS)),)
$(CONSTRAINTS):
	@echo "$@ is missing: restore it (git checkout -- $@), or run make CONSTRAINTS= ... to install without pins" >&2
	exit 1
endif

FORCE:

# The exact versions installed in .venv, as set up with CONSTRAINTS (CONSTRAINTS= : the newest allowed).
lock: $(STAMP)
	@$(PY) .ci/lock.py > "$(LOCK_FILE).tmp"
	if cmp -s "$(LOCK_FILE).tmp" "$(LOCK_FILE)"; then
	  rm -f "$(LOCK_FILE).tmp"; echo "$(LOCK_FILE) unchanged"
	else
	  mv "$(LOCK_FILE).tmp" "$(LOCK_FILE)"; echo "wrote $(LOCK_FILE) ($$(grep -c == "$(LOCK_FILE)") pins)"
	fi

redis-server:
	@if command -v redis-server >/dev/null || [ -x /usr/bin/redis-server ] || [ -x /usr/sbin/redis-server ]; then exit 0; fi
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
	  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server
	else
	  echo "redis-server is missing: install it (Debian/Ubuntu: sudo apt-get install -y redis-server), then rerun make" >&2
	  exit 1
	fi

# slapd (OpenLDAP) for the LDAP group resolver's tests; preseeded so apt asks nothing and starts
# no server of its own (the tests start theirs on a free port). Skipped (not fatal) when not root.
slapd:
	@if [ -x /usr/sbin/slapd ] && command -v ldapadd >/dev/null; then exit 0; fi
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
	  echo "slapd slapd/no_configuration boolean true" | debconf-set-selections
	  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y slapd ldap-utils
	else
	  echo "slapd is missing: the LDAP tests will skip (Debian: sudo apt-get install -y slapd ldap-utils)" >&2
	fi

# Headless Chromium for the web UI tests (tests/web): installed when missing and root, else they skip.
chromium:
	@if command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then exit 0; fi
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
	  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium
	else
	  echo "chromium is missing: the web UI tests will be skipped (Debian: sudo apt-get install -y chromium)" >&2
	fi

# nftables for the network-fault tests (tests/e2e/test_netfaults.py: cuts, one-way and random
# loss inside the namespaces they make), and iptables for its NFQUEUE target where the kernel's
# nftables has no queue statement (the delay faults). Skipped (not fatal) when not root.
netfilter:
	@if [ -x /usr/sbin/nft ] && [ -x /usr/sbin/iptables ]; then exit 0; fi
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
	  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y nftables iptables
	else
	  echo "nftables is missing: the network-fault tests will skip (Debian: sudo apt-get install -y nftables iptables)" >&2
	fi

# Korral, the fake API server and the shim, each its own process; everything it starts is stopped by
# the demo itself (also on failure, Ctrl-C or SIGTERM).
demo-k8s: setup
	$(PY) -m k8s_shim.demo

demo-k8s-pools: setup
	$(PY) -m k8s_shim.demo --pools

demo: setup
	@mkdir -p "$(DEMO_DIR)"
	read -r si rest < <($(PY) -c 'from common.netutil import free_ports; print(*free_ports(2))')
	$(KORRAL) up --detach --state-dir "$(DEMO_DIR)" --workers $(DEMO_WORKERS) \
	  --si-address "127.0.0.1:$$si" --rest-address "127.0.0.1:$$rest"
	# From here on the stack is stopped however the demo ends (success, failure, Ctrl-C),
	# unless KEEP=1 and the demo succeeded: then it stays up for the dashboard and the REST API.
	keep=0
	trap '[ "$$keep" = 1 ] || $(KORRAL) down --state-dir "$(DEMO_DIR)"' EXIT
	trap 'exit 130' INT TERM
	# Beside the demo RM (the seed's SI, partitions default and edge), a second RM speaking SI v1.8
	# on the same port runs the small preset on the third worker.
	$(KORRAL) sim --preset small --si-revision v1.8 --rm-id korral-sim-v18 --no-progress \
	  --si-address "127.0.0.1:$$si" > "$(DEMO_DIR)/sim-v18.log" 2>&1 &
	v18=$$!
	# the dashboard is worth watching while the demo runs: once it ends, the RMs unregister
	echo "dashboard (live while the demo runs): http://127.0.0.1:$$rest/"
	$(KORRAL) sim --preset demo --state-dir "$(DEMO_DIR)"
	echo
	v18_status=0
	wait $$v18 || v18_status=$$?
	echo "the second RM, speaking SI v1.8 ($(DEMO_DIR)/sim-v18.log):"
	tail -n 12 "$(DEMO_DIR)/sim-v18.log"
	[ "$$v18_status" = 0 ] || { echo "the SI v1.8 RM's sim failed (exit $$v18_status)" >&2; exit "$$v18_status"; }
	echo
	$(KORRAL) status --state-dir "$(DEMO_DIR)" || true
	echo
	# The URL's line says whether the stack outlives the demo, and how to keep it (KEEP=1).
	if [ "$(KEEP)" = 1 ]; then
	  keep=1
	  echo "dashboard: http://127.0.0.1:$$rest/   REST: http://127.0.0.1:$$rest/ws/v1/   (the stack stays up: KEEP=1)"
	  echo "stop it with: $(KORRAL) down --state-dir $(DEMO_DIR)"
	else
	  echo "dashboard: http://127.0.0.1:$$rest/   REST: http://127.0.0.1:$$rest/ws/v1/   (stopped now; make demo KEEP=1 keeps the stack up)"
	fi

test: setup
	@$(PY) -m pytest $(PYTEST_ARGS)

# compare needs YuniKorn's benchmark beside the checkout (exit 2 without it: then bench core alone);
# churn writes its JSON and PNG to .state/churn/, k8s to .state/k8s/
bench: setup
	@rc=0; $(KORRAL) bench compare || rc=$$?
	if [ "$$rc" = 2 ]; then $(KORRAL) bench core; elif [ "$$rc" != 0 ]; then exit "$$rc"; fi
	$(KORRAL) bench core --preemption
	$(KORRAL) bench e2e --breakdown
	$(KORRAL) bench churn
	$(KORRAL) bench churn --partitions 2
	$(KORRAL) bench recovery
	$(KORRAL) bench k8s --rate 500,1000

# The busy loop is killed by its pid however this ends (all passed, a failed run, Ctrl-C), and
# stops by itself if this shell dies without running its trap (it watches its parent).
test-stress: setup
	@$(PY) -c $$'import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n    for _ in range(1_000_000): pass' &
	busy=$$!
	trap 'kill "$$busy" 2>/dev/null || true' EXIT
	trap 'exit 130' INT TERM
	t0=$$SECONDS
	for run in $$(seq 1 "$(STRESS_RUNS)"); do
	  echo "== stress run $$run of $(STRESS_RUNS): $(STRESS_TESTS), one core kept busy (pid $$busy) =="
	  t=$$SECONDS
	  if ! $(PY) -m pytest -q $(STRESS_TESTS) $(PYTEST_ARGS); then
	    echo "== stress run $$run of $(STRESS_RUNS) FAILED after $$((SECONDS - t)) s ($$((run - 1)) runs passed before it, $$((SECONDS - t0)) s in all) ==" >&2
	    exit 1
	  fi
	  echo "== stress run $$run of $(STRESS_RUNS) passed in $$((SECONDS - t)) s =="
	done
	echo "== all $(STRESS_RUNS) stress runs passed in $$((SECONDS - t0)) s under load =="

soak: setup
	@$(PY) -m pytest -m slow $(PYTEST_ARGS)

soak-net: setup
	@$(PY) -m pytest -m slow -s tests/e2e/test_netfaults.py $(PYTEST_ARGS)
