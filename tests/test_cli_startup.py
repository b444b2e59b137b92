"""Start-up as a newcomer meets it: a busy port, an unwritable state dir (given, or the default
for a non-root user), a hostile config or scenario file, and a readable --help; each a line,
never a traceback."""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gpustats.config import OPTIONS, build_arg_parser, resolve
from gpustats.engine.statedir import choose_state_dir, user_state_dir
from tests.support.documents import alias_bomb
from tests.support.paths import REPO_ROOT
from tests.support.waiting import poll

NOBODY = 65534


def run_cli(*args, env=None, preexec=(), cwd=None, timeout=60):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSTATS_")}
    full_env["PYTHONPATH"] = str(REPO_ROOT)
    full_env.update(env or {})
    return subprocess.run([*preexec, sys.executable, "-m", "gpustats", *args],
                          capture_output=True, text=True, timeout=timeout, env=full_env,
                          cwd=cwd or str(REPO_ROOT))


def serve_until_ready(*args, env=None, preexec=(), cwd=None) -> tuple[int, str]:
    """The daemon serving on a port of the kernel's choice, stopped (SIGTERM) once it says it
    serves, or run to its exit: (exit status, what it logged). Killed if it outlives that."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSTATS_")}
    full_env.update({"PYTHONPATH": str(REPO_ROOT), **(env or {})})
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen([*preexec, sys.executable, "-m", "gpustats", "--listen",
                                 "127.0.0.1:0", *args], stdout=subprocess.DEVNULL, stderr=log,
                                text=True, env=full_env, cwd=cwd or str(REPO_ROOT))
        try:
            def serving() -> bool:
                log.seek(0)
                return "serving on" in log.read()

            if poll(lambda: proc.poll() is not None or serving(), timeout=60) \
                    and proc.poll() is None:
                proc.terminate()
            status = proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        log.seek(0)
        return status, log.read()


def quiet(tmp_path):
    """Flags that keep a start-up off the host's GPUs and sockets."""
    return ("--sysfs-root", str(tmp_path / "nosys"), "--pod-resources-socket", "",
            "--runtime-socket", "")


def test_port_in_use_is_one_line_and_exit_2(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_cli("--listen", f"127.0.0.1:{port}", "--state-dir", str(tmp_path / "s"),
                         "--log-level", "warning", *quiet(tmp_path))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines == [f"gpustats: cannot listen on 127.0.0.1:{port}: Address already in use "
                     "(choose another with --listen HOST:PORT)"]


@pytest.mark.parametrize("taken, reset", [("--listen", False), ("--health-listen", False),
                                           ("--listen", True)])
def test_a_start_up_refused_its_port_writes_no_state(tmp_path, taken, reset):
    """The sockets are bound before the state dir is read: an older format (which a start-up
    writes again in the current one) and --state-reset (which moves the files aside) leave
    the state dir byte for byte as found when the port is taken."""
    state = tmp_path / "state"
    shutil.copytree(REPO_ROOT / "tests" / "golden" / "state_v3", state)
    before = {p.name: p.read_bytes() for p in state.iterdir()}
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        addresses = {"--listen": "127.0.0.1:0", taken: f"127.0.0.1:{port}"}
        result = run_cli(*(x for flag, address in addresses.items() for x in (flag, address)),
                         "--state-dir", str(state), *(["--state-reset"] if reset else []),
                         "--log-level", "warning", *quiet(tmp_path))
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"gpustats: cannot listen on 127.0.0.1:{port}"), result.stderr
    assert {p.name: p.read_bytes() for p in state.iterdir()} == before


@pytest.mark.parametrize("how", ["flag", "env"])
def test_given_state_dir_not_writable_is_one_line_and_exit_2(tmp_path, how):
    (tmp_path / "a-file").write_text("")
    bad = str(tmp_path / "a-file" / "state")           # under a file: unwritable even for root
    args, env = (["--state-dir", bad], None) if how == "flag" else ([], {"GPUSTATS_STATE_DIR": bad})
    result = run_cli("--listen", "127.0.0.1:0", *args, *quiet(tmp_path), env=env)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"gpustats: state dir {bad} is not writable (Not a directory); pass a writable "
        "directory with --state-dir PATH (or GPUSTATS_STATE_DIR)"]


def test_default_state_dir_falls_back_to_the_users_for_a_non_root_user():
    setpriv = shutil.which("setpriv")
    if setpriv is None or os.geteuid() != 0:
        pytest.skip("needs root and setpriv to run as an unprivileged user")
    home = tempfile.mkdtemp(prefix="gpustats-home-")     # outside root-only temp dirs
    try:
        os.chmod(home, 0o755)
        os.chown(home, NOBODY, NOBODY)
        drop = (setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups")
        probe = subprocess.run([*drop, sys.executable, "-c", "import flask, yaml"],
                               capture_output=True, text=True, timeout=60,
                               env={"PYTHONPATH": str(REPO_ROOT)}, cwd=home)
        if probe.returncode != 0:
            pytest.skip(f"an unprivileged user cannot run this interpreter: {probe.stderr[-200:]}")
        default = next(o.default for o in OPTIONS if o.name == "state_dir")
        writable = subprocess.run([*drop, "sh", "-c", f'mkdir -p "{default}" 2>/dev/null && '
                                   f'touch "{default}/.probe" 2>/dev/null'], cwd=home)
        if writable.returncode == 0:
            pytest.skip(f"{default} is writable by an unprivileged user here")
        env = {"HOME": home, "XDG_STATE_HOME": f"{home}/xdg"}
        status, log = serve_until_ready(*quiet(Path(home)), env=env, preexec=drop, cwd=home)
        assert status == 0, log
        said = [line for line in log.splitlines() if "state dir" in line]
        assert len(said) == 1 and "WARNING" in said[0]
        assert f"keeping energy counters in {home}/xdg/gpustats" in said[0]
        assert "Traceback" not in log
        assert (Path(home) / "xdg" / "gpustats").is_dir()
        # --once reads it there, and says nothing of a state dir it does not write.
        result = run_cli("--once", *quiet(Path(home)), env=env, preexec=drop, cwd=home)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["node"]["nodeName"]
        assert "state dir" not in result.stderr
        # Without XDG_STATE_HOME: ~/.local/state/gpustats.
        status, log = serve_until_ready(*quiet(Path(home)), env={"HOME": home},
                                        preexec=drop, cwd=home)
        assert status == 0, log
        assert (Path(home) / ".local" / "state" / "gpustats").is_dir()
    finally:
        shutil.rmtree(home, ignore_errors=True)


def one_line_exit_2(result) -> str:
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) < 400, result.stderr[:2000]
    return lines[0]


# The file is refused before any of it is expanded; the code before took seconds and
# hundreds of MB to print the expanded value in a line of tens of MB (2.4 GB at 9 levels).
def test_config_alias_bomb_is_one_line_and_exit_2(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(f"listen: {alias_bomb(levels=7)}\n")
    line = one_line_exit_2(run_cli("--config", str(bomb), "--state-dir", str(tmp_path / "s"),
                                   *quiet(tmp_path), timeout=20))
    assert line == f"gpustats: config file {bomb}: its aliases would expand it by more than " \
                   "65536 nodes and characters"


@pytest.mark.parametrize("how", ["flag", "env"])
def test_config_fifo_is_refused_at_once(tmp_path, how):
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)                                   # nobody ever writes to it
    args, env = (["--config", str(fifo)], None) if how == "flag" else \
        ([], {"GPUSTATS_CONFIG": str(fifo)})
    line = one_line_exit_2(run_cli(*args, "--state-dir", str(tmp_path / "s"), *quiet(tmp_path),
                                   env=env, timeout=20))
    assert line == f"gpustats: config file {fifo}: not a regular file"


def test_scenario_alias_bomb_is_one_line_and_exit_2(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(f"driver_version: {alias_bomb(levels=7)}\ndevices: [{{uuid: GPU-a}}]\n")
    line = one_line_exit_2(run_cli("--simulate", str(bomb), "--once", "--state-dir",
                                   str(tmp_path / "s"), *quiet(tmp_path), timeout=20))
    assert line == f"gpustats: cannot start: {bomb}: its aliases would expand it by more " \
                   "than 65536 nodes and characters"


def test_state_dir_choice(tmp_path, monkeypatch):
    (tmp_path / "f").write_text("")
    bad = str(tmp_path / "f" / "x")
    env = {"XDG_STATE_HOME": str(tmp_path / "xdg")}
    assert choose_state_dir(str(tmp_path / "ok"), explicit=True, environ=env).path == \
        str(tmp_path / "ok")
    chosen = choose_state_dir(bad, explicit=False, environ=env)
    assert chosen.path == str(tmp_path / "xdg" / "gpustats") and bad in chosen.note
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert user_state_dir({"XDG_STATE_HOME": "relative/ignored"}) == \
        str(tmp_path / "home" / ".local" / "state" / "gpustats")


def test_explicit_options_are_recorded(tmp_path):
    args = build_arg_parser().parse_args(["--state-dir", str(tmp_path)])
    assert "state_dir" in resolve(args, {}).explicit
    assert "state_dir" not in resolve(build_arg_parser().parse_args([]), {}).explicit
    assert "state_dir" in resolve(build_arg_parser().parse_args([]),
                                  {"GPUSTATS_STATE_DIR": str(tmp_path)}).explicit


def test_help_shows_defaults_as_typed():
    result = run_cli("--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())         # argparse wraps lines
    assert "None" not in text and "(13," not in text and "IdlePower" not in text
    assert "default 13,31,43,45,68,109" in text and "default 5]" in text
    assert "default /var/lib/gpustats" in text


def test_start_up_settles_the_garbage_collector_for_ticks():
    """After start-up, a tick's worth of live objects no longer sets off collections."""
    import gc

    from gpustats.cli import GC_FIRST_GENERATION_THRESHOLD, settle_garbage_collector

    thresholds = gc.get_threshold()
    try:
        settle_garbage_collector()
        assert gc.get_threshold()[0] == GC_FIRST_GENERATION_THRESHOLD
        assert gc.get_freeze_count() > 0          # start-up's objects are out of the scans
        collections = gc.get_stats()[0]["collections"]
        alive = [[n] for n in range(5000)]          # a tick's snapshot under construction
        assert gc.get_stats()[0]["collections"] == collections
        del alive
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def test_the_dcgm_scrape_client_is_loaded_only_where_one_is_configured(tmp_path):
    """requests and what it loads (about 5 MB resident) stay out of a daemon with no
    dcgm-exporter to scrape."""
    scenario = Path(__file__).resolve().parent.parent / "examples" / "two-gpus.yaml"
    probe = (
        "import sys\n"
        "from gpustats.cli import Daemon\n"
        "from gpustats.config import build_arg_parser, resolve\n"
        "def build(*extra):\n"
        f"    args = build_arg_parser().parse_args(['--simulate', {str(scenario)!r}, '--state-dir',"
        f" {str(tmp_path / 'state')!r}, *extra])\n"
        "    Daemon(resolve(args, {})).close()\n"
        "build()\n"
        "print('without', 'requests' in sys.modules)\n"
        "build('--dcgm-exporter-url', 'http://127.0.0.1:9/metrics')\n"
        "print('with', 'requests' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["without False", "with True"]


def test_once_reads_the_state_dir_where_it_is_and_makes_none(tmp_path):
    from gpustats.engine.statedir import existing_state_dir
    default, user = tmp_path / "var-lib", tmp_path / "xdg"
    environ = {"XDG_STATE_HOME": str(user)}
    assert existing_state_dir(str(default), explicit=False, environ=environ).path == str(default)
    (user / "gpustats").mkdir(parents=True)
    assert existing_state_dir(str(default), explicit=False,
                              environ=environ).path == str(user / "gpustats")
    assert existing_state_dir(str(default), explicit=True, environ=environ).path == str(default)
    assert not default.exists()
