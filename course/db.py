"""The course's one gradebook: SQLite by default, PostgreSQL for parallel and distributed grading.

nbgrader keeps every score in the gradebook named by `CourseDirectory.db_url`. SQLite
(`gradebook.db`) takes one writer at a time, which suits sequential grading; graders working
in parallel, on one machine or many, share a PostgreSQL database instead. The URL a course
uses lives in `.gradebook-url` next to its `nbgrader_config.py` (git-ignored, readable by the
instructor only); nbgrader_config.py reads it, so `nbgrader export`, formgrader and
`course grade` all see the same gradebook.

`course db start` initialises and starts a PostgreSQL cluster in the course folder (`.pgdata/`)
on 127.0.0.1 and a free port, for those without a server; `course db use URL` points the course
at any server; `migrate` copies a whole gradebook (students, assignments, notebooks, cells,
submissions, grades, comments, extensions) from one URL to another.

PostgreSQL refuses to run as root: when this runs as root the cluster runs as the unprivileged
`postgres` user that Debian's package creates (COURSE_PG_USER to choose another), and lives in
/var/lib/postgresql/course-clusters/ (linked from `.pgdata`) when that user cannot reach the
course folder.
"""
from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import socket
import subprocess
import time
from pathlib import Path

URL_FILE = ".gradebook-url"
DATA_DIR = ".pgdata"
DB_NAME = "gradebook"
DB_USER = "course"


# ---------------------------------------------------------------- which gradebook a course uses

def sqlite_url(course_dir: Path) -> str:
    return f"sqlite:///{Path(course_dir).resolve() / 'gradebook.db'}"


def course_url(course_dir: Path) -> str:
    """The gradebook URL of a course folder: `.gradebook-url` if present, else gradebook.db."""
    f = Path(course_dir) / URL_FILE
    if f.exists():
        url = f.read_text().strip()
        if url:
            return url
    return sqlite_url(course_dir)


def set_course_url(course_dir: Path, url: str | None) -> None:
    """Record the course's gradebook (None: back to gradebook.db). Written readable by the
    instructor only, because a PostgreSQL URL carries its password."""
    f = Path(course_dir) / URL_FILE
    if url is None or url == sqlite_url(course_dir):
        f.unlink(missing_ok=True)
        return
    fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(url + "\n")
    os.chmod(f, 0o600)


def is_postgres(url: str) -> bool:
    return url.startswith(("postgresql:", "postgresql+", "postgres:"))


def normalise(url: str) -> str:
    """`postgres://` (Heroku style) -> `postgresql://`, which SQLAlchemy understands."""
    return "postgresql://" + url[len("postgres://"):] if url.startswith("postgres://") else url


def absolute(url: str, base: Path) -> str:
    """A relative SQLite path (`sqlite:///gradebook.db`) made absolute against ``base``."""
    url = normalise(url)
    if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):
        return f"sqlite:///{(Path(base) / url[len('sqlite:///'):]).resolve()}"
    return url


def redact(url: str) -> str:
    """The URL without its password, for printing."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


# ---------------------------------------------------------------- a gradebook's contents

def _tables():
    from nbgrader.api import Base
    return Base.metadata.sorted_tables        # parents before children


def counts(url: str) -> dict[str, int]:
    """Rows per nbgrader table (0 for a missing table)."""
    from sqlalchemy import create_engine, func, inspect, select
    engine = create_engine(normalise(url), future=True)
    try:
        present = set(inspect(engine).get_table_names())
        with engine.connect() as conn:
            return {t.name: (conn.execute(select(func.count()).select_from(t)).scalar() if t.name in present else 0)
                    for t in _tables()}
    finally:
        engine.dispose()


def dump(url: str) -> dict[str, list[dict]]:
    """Every row of every nbgrader table, sorted, as Python values (for comparisons)."""
    from sqlalchemy import create_engine, inspect, select, text
    engine = create_engine(normalise(url), future=True)
    out: dict[str, list[dict]] = {}
    try:
        present = set(inspect(engine).get_table_names())
        with engine.connect() as conn:
            for t in _tables():
                rows = [dict(r._mapping) for r in conn.execute(select(t))] if t.name in present else []
                out[t.name] = sorted(rows, key=lambda r: repr(sorted(r.items(), key=lambda kv: kv[0])))
            if "alembic_version" in present:
                out["alembic_version"] = [dict(r._mapping) for r in conn.execute(text("SELECT version_num FROM alembic_version"))]
    finally:
        engine.dispose()
    return out


def is_empty(url: str) -> bool:
    return not any(counts(url).values())


def migrate(src: str, dest: str, *, force: bool = False) -> dict[str, int]:
    """Copy a whole nbgrader gradebook from ``src`` to ``dest`` (any SQLAlchemy URLs nbgrader
    supports), table by table in foreign-key order, in one transaction; returns rows copied.

    The destination gets nbgrader's schema (and the source's alembic version). It must hold no
    gradebook rows unless ``force`` (then its rows are replaced). Primary keys are nbgrader's
    UUID strings, so every reference is kept as it is.
    """
    from sqlalchemy import create_engine, delete, inspect, insert, select, text
    from nbgrader.api import Base
    src, dest = normalise(src), normalise(dest)
    if src == dest:
        raise ValueError("source and destination are the same gradebook")
    s_engine = create_engine(src, future=True)
    d_engine = create_engine(dest, future=True)
    copied: dict[str, int] = {}
    try:
        s_tables = set(inspect(s_engine).get_table_names())
        missing = [t.name for t in _tables() if t.name not in s_tables]
        if missing:
            raise ValueError(f"{redact(src)} is not an nbgrader gradebook (no tables {missing})")
        Base.metadata.create_all(bind=d_engine)
        if not force and not is_empty(dest):
            raise ValueError(f"{redact(dest)} already holds a gradebook; pass force to replace it")
        with s_engine.connect() as s, d_engine.begin() as d:
            version = None
            if "alembic_version" in s_tables:
                version = s.execute(text("SELECT version_num FROM alembic_version")).scalar()
            for t in reversed(_tables()):
                d.execute(delete(t))
            for t in _tables():
                rows = [dict(r._mapping) for r in s.execute(select(t))]
                for i in range(0, len(rows), 500):
                    d.execute(insert(t), rows[i:i + 500])
                copied[t.name] = len(rows)
            d.execute(text("CREATE TABLE IF NOT EXISTS alembic_version (version_num VARCHAR(32) NOT NULL)"))
            d.execute(text("DELETE FROM alembic_version"))
            if version:
                d.execute(text("INSERT INTO alembic_version (version_num) VALUES (:v)"), {"v": version})
    finally:
        s_engine.dispose()
        d_engine.dispose()
    return copied


# ---------------------------------------------------------------- a local PostgreSQL cluster

class PostgresError(RuntimeError):
    pass


def pg_bin(name: str) -> Path | None:
    """A PostgreSQL server program: on PATH, else Debian's /usr/lib/postgresql/<newest>/bin."""
    found = shutil.which(name)
    if found:
        return Path(found)
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"),
                      key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0, reverse=True)
    for d in versions + [Path("/usr/local/pgsql/bin"), Path("/opt/homebrew/bin")]:
        if (d / name).exists():
            return d / name
    return None


def server_available() -> bool:
    return all(pg_bin(n) for n in ("initdb", "pg_ctl", "postgres"))


def _server_user() -> str | None:
    """The user the server runs as: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    return os.environ.get("COURSE_PG_USER", "postgres")


def _run(cmd: list, user: str | None, **kw) -> subprocess.CompletedProcess:
    if user:
        import pwd
        pw = pwd.getpwnam(user)
        kw.update(user=pw.pw_uid, group=pw.pw_gid, extra_groups=[])
        kw.setdefault("env", {**os.environ, "HOME": pw.pw_dir, "USER": user, "LOGNAME": user})
        kw.setdefault("cwd", "/")
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)


def _can_enter(user: str, path: Path) -> bool:
    return _run(["test", "-x", path], user).returncode == 0


def data_dir(course_dir: Path) -> Path:
    return Path(course_dir).resolve() / DATA_DIR


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host if host not in ("0.0.0.0", "*") else "127.0.0.1", 0))
        return s.getsockname()[1]


def _port_free(host: str, port: int) -> bool:
    """Whether PostgreSQL could listen on the port now. Like PostgreSQL, bind with SO_REUSEADDR:
    a closed connection of the last run lingering in TIME_WAIT (a client that was still connected
    when the server stopped) does not keep the server from its port, so it must not make a restart
    move the gradebook to another port (found flaky on a loaded machine)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host if host not in ("0.0.0.0", "*") else "127.0.0.1", port))
            return True
        except OSError:
            return False


def _conf(data: Path) -> dict:
    path = data / "postgresql.conf"
    conf = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^\s*(\w+)\s*=\s*'?([^'#]*)'?", line)
        if m:
            conf[m.group(1)] = m.group(2).strip()
    return conf


def _secret_file(course_dir: Path) -> Path:
    """The local cluster's password (instructor-only, like .gradebook-url)."""
    return Path(course_dir).resolve() / ".pgpassword"


def init(course_dir: Path, host: str = "127.0.0.1") -> Path:
    """initdb a cluster for the course (idempotent); returns its data folder."""
    course_dir = Path(course_dir).resolve()
    link = data_dir(course_dir)
    if (link / "PG_VERSION").exists():
        return link.resolve()
    if not server_available():
        raise PostgresError("PostgreSQL's server programs (initdb, pg_ctl, postgres) were not found: "
                            "install PostgreSQL (Debian/Ubuntu: apt-get install postgresql; macOS: "
                            "brew install postgresql) or pass --db postgresql://... for an existing server")
    user = _server_user()
    data = link
    if link.is_dir() and not link.is_symlink() and any(link.iterdir()):
        shutil.rmtree(link)            # what an interrupted initdb left
    if user:
        try:
            import pwd
            pwd.getpwnam(user)
        except KeyError:
            raise PostgresError(f"PostgreSQL refuses to run as root and there is no {user!r} user to run "
                                "it as: install Debian's postgresql package (it creates one) or set "
                                "COURSE_PG_USER to an unprivileged user") from None
        pw = pwd.getpwnam(user)
        if _can_enter(user, course_dir):
            # .pgdata/ in the course folder, owned by the server user
            if link.is_symlink():
                link.unlink()
            link.mkdir(mode=0o700, exist_ok=True)
            os.chown(link, pw.pw_uid, pw.pw_gid)
        else:
            # The server user cannot enter the course folder (e.g. under /root or a 0700 /tmp
            # folder): keep the cluster in its own home, linked from the course folder.
            key = hashlib.sha1(str(course_dir).encode()).hexdigest()[:12]
            home = Path(_run(["sh", "-c", "echo $HOME"], user).stdout.strip() or "/var/lib/postgresql")
            data = home / "course-clusters" / f"{course_dir.name}-{key}"
            if link.is_symlink() or link.exists():
                if link.is_symlink():
                    link.unlink()
                else:
                    shutil.rmtree(link)
            _run(["mkdir", "-p", data.parent], user, check=True)
            link.symlink_to(data, target_is_directory=True)
    password = secrets.token_urlsafe(24)
    secret = _secret_file(course_dir)
    fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(password)
    # initdb reads the password from a file the server user can read, removed straight after.
    import tempfile
    tmp = Path(tempfile.mkdtemp(prefix="course-pg-"))
    pwfile = tmp / "pw"
    pwfile.write_text(password)
    try:
        if user:
            import pwd
            pw = pwd.getpwnam(user)
            for p in (tmp, pwfile):
                os.chown(p, pw.pw_uid, pw.pw_gid)
        if not user:
            data.mkdir(parents=True, exist_ok=True)
        proc = _run([pg_bin("initdb"), "-D", data, "-U", DB_USER, "--auth=scram-sha-256",
                     f"--pwfile={pwfile}", "-E", "UTF8", "--locale=C"], user)
        if proc.returncode != 0:
            raise PostgresError(f"initdb failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    listen = "*" if host in ("0.0.0.0", "*") else host
    extra = (f"\n# course db start\nlisten_addresses = '{listen}'\nport = {_free_port(host)}\n"
             "unix_socket_directories = ''\nmax_connections = 200\n")
    _append(data / "postgresql.conf", extra, user)
    if listen != "127.0.0.1":
        _append(data / "pg_hba.conf", "host all all 0.0.0.0/0 scram-sha-256\n", user)
    return data


def _append(path: Path, text: str, user: str | None) -> None:
    if user:
        _run(["sh", "-c", f"cat >> '{path}'"], user, input=text, check=True)
    else:
        with open(path, "a") as f:
            f.write(text)


def _set_port(data: Path, port: int, user: str | None) -> None:
    _append(data / "postgresql.conf", f"port = {port}\n", user)


def running(course_dir: Path) -> bool:
    data = data_dir(course_dir)
    if not (data / "PG_VERSION").exists():
        return False
    return _run([pg_bin("pg_ctl"), "-D", data.resolve(), "status"], _server_user()).returncode == 0


def local_url(course_dir: Path) -> str:
    data = data_dir(course_dir).resolve()
    conf = _conf(data)
    host = conf.get("listen_addresses", "127.0.0.1")
    if host in ("*", "0.0.0.0"):
        host = socket.getfqdn()
    password = _secret_file(course_dir).read_text().strip()
    return f"postgresql://{DB_USER}:{password}@{host}:{conf['port']}/{DB_NAME}"


def start(course_dir: Path, host: str = "127.0.0.1", timeout: float = 60) -> str:
    """Initialise (first time) and start the course's local cluster; returns the gradebook URL."""
    course_dir = Path(course_dir).resolve()
    data = init(course_dir, host)
    user = _server_user()
    if not running(course_dir):
        conf = _conf(data)
        if not _port_free(conf.get("listen_addresses", "127.0.0.1").replace("*", "127.0.0.1"), int(conf["port"])):
            _set_port(data, _free_port(host), user)
        proc = _run([pg_bin("pg_ctl"), "-D", data, "-l", data / "server.log", "-w", "-t", str(int(timeout)),
                     "start"], user)
        if proc.returncode != 0:
            log = _run(["tail", "-n", "30", data / "server.log"], user).stdout
            raise PostgresError(f"pg_ctl start failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}\n{log}")
    url = local_url(course_dir)
    _ensure_database(url, timeout)
    return url


def _ensure_database(url: str, timeout: float = 30) -> None:
    import psycopg
    from sqlalchemy.engine import make_url
    u = make_url(url)
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn = psycopg.connect(host=u.host, port=u.port, user=u.username, password=u.password,
                                   dbname="postgres", connect_timeout=5, autocommit=True)
            break
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (u.database,))
            if cur.fetchone() is None:
                cur.execute(f'CREATE DATABASE "{u.database}"')
    finally:
        conn.close()


def stop(course_dir: Path) -> bool:
    """Stop the course's local cluster; False if it was not running."""
    if not running(course_dir):
        return False
    data = data_dir(course_dir).resolve()
    proc = _run([pg_bin("pg_ctl"), "-D", data, "-m", "fast", "-w", "stop"], _server_user())
    if proc.returncode != 0:
        raise PostgresError(f"pg_ctl stop failed:\n{proc.stdout}\n{proc.stderr}")
    return True


def ping(url: str, timeout: float = 5) -> None:
    """Raise unless the gradebook answers."""
    from sqlalchemy import create_engine, text
    engine = create_engine(normalise(url), future=True,
                           connect_args={"connect_timeout": int(timeout)} if is_postgres(url) else {})
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    finally:
        engine.dispose()


def use(course_dir: Path, url: str, *, migrate_existing: bool = True) -> dict[str, int] | None:
    """Point the course at ``url``; the course's current gradebook is copied there first when it
    holds rows and ``url`` holds none (the old one is left as it was, a backup)."""
    url = normalise(url)
    current = course_url(course_dir)
    copied = None
    if migrate_existing and current != url and _has_rows(current) and is_empty(url):
        copied = migrate(current, url)
    ensure_schema(url)
    set_course_url(course_dir, url)
    return copied


def alembic_head() -> str:
    """nbgrader's schema version (what `nbgrader.api.get_alembic_version` asks the alembic
    program for, read in-process)."""
    from alembic.script import ScriptDirectory
    from nbgrader.dbutil import ALEMBIC_DIR
    return ScriptDirectory(ALEMBIC_DIR).get_current_head()


def ensure_schema(url: str) -> None:
    """nbgrader's tables and alembic version in an empty database (what nbgrader's Gradebook
    does on first use, without adding a course row)."""
    from sqlalchemy import create_engine, inspect, text
    from nbgrader.api import Base
    engine = create_engine(normalise(url), future=True)
    try:
        if inspect(engine).get_table_names():
            return
        Base.metadata.create_all(bind=engine)
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE IF NOT EXISTS alembic_version (version_num VARCHAR(32) NOT NULL)"))
            conn.execute(text("INSERT INTO alembic_version (version_num) VALUES (:v)"), {"v": alembic_head()})
    finally:
        engine.dispose()


def _has_rows(url: str) -> bool:
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).exists():
        return False
    try:
        return not is_empty(url)
    except Exception:
        return False


def gradebook(url: str):
    """nbgrader's Gradebook on ``url`` for the course it already holds (nbgrader's Gradebook
    would otherwise add a 'default_course' row)."""
    from nbgrader.api import Course, Gradebook
    from sqlalchemy import create_engine, inspect, select
    engine = create_engine(normalise(url), future=True)
    try:
        course = None
        if "course" in inspect(engine).get_table_names():
            with engine.connect() as conn:
                course = conn.execute(select(Course.__table__.c.id).order_by(Course.__table__.c.id)).scalars().first()
    finally:
        engine.dispose()
    return Gradebook(normalise(url), course or "default_course")


def drop(course_dir: Path) -> bool:
    """Stop the course's local cluster and delete it (its data too, wherever `.pgdata` points);
    the course goes back to gradebook.db if it used that cluster. False if there was none."""
    course_dir = Path(course_dir).resolve()
    link = data_dir(course_dir)
    if not (link.is_symlink() or link.exists()):
        return False
    was_local = False
    if (link / "PG_VERSION").exists():
        try:
            was_local = course_url(course_dir) == local_url(course_dir)
        except (OSError, KeyError):
            pass
        stop(course_dir)
    target = link.resolve()
    if link.is_symlink():
        link.unlink()
    shutil.rmtree(target, ignore_errors=True)
    _secret_file(course_dir).unlink(missing_ok=True)
    if was_local:
        set_course_url(course_dir, None)
    return True
