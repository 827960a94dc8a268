"""Why the Airflow tests never open the SQLite metadata DB's files outside SQLite (issue #32).

Airflow's engine in a pytest process holds WAL-mode connections to the test home's
``airflow.db``. POSIX locks belong to a process, and closing any descriptor of a file drops
all of the process's locks on it, so a plain ``open()``/``close()`` of ``airflow.db``,
``-wal`` or ``-shm`` (a secret scan reading every file, ``shutil.copy``) silently removes
SQLite's locks. Another process (a provision subprocess) then takes itself for the DB's only
user: it checkpoints and deletes the WAL on close, and the two sides write to different WALs.
That is what failed test_warm (``disk I/O error``) and test_cluster (the connection a
subprocess wrote was not seen: ``spark-submit --master yarn``) in one process after
test_dag_test's scan and the rewind monitor's copy. The helpers the tests use instead keep the
locks.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.fixtures.airflow import copy_db, files_beside_the_db


def _held(db: Path) -> list[str]:
    """The names of ``db``'s files this process holds a POSIX lock on (``/proc/locks``)."""
    inodes = {p.stat().st_ino: p.name for p in db.parent.glob(f"{db.name}*")}
    held = []
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if fields[1] == "POSIX" and fields[4] == str(os.getpid()):
            inode = int(fields[5].split(":")[2])
            if inode in inodes:
                held.append(inodes[inode])
    return sorted(set(held))


def _write(db: Path, value: int) -> None:
    """Another process writes ``value`` (as a provision subprocess writes a connection)."""
    code = "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); " \
           f"c.execute('INSERT INTO t VALUES ({value})'); c.commit(); c.close()"  # fmt: skip
    subprocess.run([sys.executable, "-c", code, str(db)], check=True, timeout=60)


def _read_elsewhere(db: Path) -> list[int]:
    code = "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); " \
           "print(*[x for (x,) in c.execute('SELECT x FROM t')])"  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code, str(db)], check=True, timeout=60,
                         capture_output=True, text=True).stdout  # fmt: skip
    return [int(x) for x in out.split()]


def _scenario(home: Path, touch: str) -> tuple[list[int], list[int], list[str]]:
    """A WAL connection held here; ``touch`` the DB's files ("open": plain reads of every file
    as a scan and a copy do, "helpers": files_beside_the_db and copy_db); then another process
    writes 2, this one 3, the other 4. Returns what this connection sees before it closes,
    what another process sees after, and the locks held after the touch."""
    db = home / "airflow.db"
    ours = sqlite3.connect(db)
    try:
        ours.execute("PRAGMA journal_mode=WAL")
        ours.execute("CREATE TABLE t (x INTEGER)")
        ours.execute("INSERT INTO t VALUES (1)")
        ours.commit()
        ours.execute("SELECT count(*) FROM t").fetchall()
        (home / "logs").mkdir()
        (home / "logs" / "task.log").write_text("a task's log\n")
        if touch == "open":
            for path in sorted(home.rglob("*")):
                if path.is_file():
                    path.read_bytes()
        else:
            assert [p.name for p in files_beside_the_db(home)] == ["task.log"]
            for path in files_beside_the_db(home):
                path.read_bytes()
            copy_db(db, home / "copy.db")
        held = _held(db)
        _write(db, 2)
        ours.execute("INSERT INTO t VALUES (3)")
        ours.commit()
        _write(db, 4)
        seen_here = sorted(x for (x,) in ours.execute("SELECT x FROM t"))
    finally:
        ours.close()
    return seen_here, sorted(_read_elsewhere(db)), held


def test_opening_the_dbs_files_outside_sqlite_loses_writes(tmp_path: Path) -> None:
    here, elsewhere, held = _scenario(tmp_path, "open")
    assert held == []  # every SQLite lock of this process is gone
    # this connection missed the other process's last write, and the DB lost a write
    assert here == [1, 2, 3] and elsewhere != [1, 2, 3, 4], (here, elsewhere)


def test_the_helpers_keep_sqlites_locks_and_every_write(tmp_path: Path) -> None:
    here, elsewhere, held = _scenario(tmp_path, "helpers")
    assert held == ["airflow.db", "airflow.db-shm"]
    assert here == elsewhere == [1, 2, 3, 4]
    with sqlite3.connect(tmp_path / "copy.db") as copy:
        assert [x for (x,) in copy.execute("SELECT x FROM t")] == [1]
