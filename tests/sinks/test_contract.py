"""Every built-in sink runs the sink contract (sluice.testing.sink_contract) on every backend
it supports: files and Delta on a local directory and on S3 (SeaweedFS), PostgreSQL on a real
server.

make test runs each sink on one backend, and the files sink (Parquet) on S3 as well; the rest of
the matrix (JSON lines, upsert files on S3) is make test-extended's, Delta on S3 make chaos's.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sluice.sinks.files import STAGING, FilesSink, read_rows, read_upsert
from sluice.spec import DeltaSinkConfig, FilesSinkConfig, PostgresSinkConfig
from sluice.testing.sink_contract import KEYS, Harness, SinkContract, UpsertSinkContract

from tests.fixtures.pipelines import (
    LOCAL_NOW_S3_EXTENDED,
    LOCAL_NOW_S3_SLOW,
    Workspace,
    new_workspace,
)


def _files(ws: Workspace, mode: str, fmt: str = "parquet") -> Harness:
    spec = FilesSinkConfig(name="out", path=ws.uri("out"), format=fmt, mode=mode,  # type: ignore[arg-type]
                           keys=KEYS if mode == "upsert" else ())  # fmt: skip
    store = ws.store("out")

    def rows() -> list[dict[str, Any]]:
        if mode == "upsert":
            return read_upsert(store, fmt, KEYS)
        return read_rows(store, fmt)

    return Harness(
        make=lambda: FilesSink(spec, ws.store("out")),
        rows=rows,
        leftovers=lambda: [i.key for i in store.list(STAGING)],
    )


class TestFilesAppend(SinkContract):
    @pytest.fixture(params=["parquet", pytest.param("jsonl", marks=pytest.mark.extended)])
    def harness(self, workspace: Workspace, request: pytest.FixtureRequest) -> Harness:
        return _files(workspace, "append", request.param)


class TestFilesUpsert(UpsertSinkContract):
    @pytest.fixture(params=LOCAL_NOW_S3_EXTENDED)
    def workspace(self, request: pytest.FixtureRequest, tmp_path: Any) -> Workspace:
        return new_workspace(request, tmp_path)

    @pytest.fixture
    def harness(self, workspace: Workspace) -> Harness:
        return _files(workspace, "upsert")


@pytest.fixture(scope="module")
def contract_db(postgres_server: Any) -> str:
    url = postgres_server.create_database("contract")
    return "postgresql://" + url.split("://", 1)[1]


def _postgres(url: str, mode: str) -> Harness:
    from sluice.sinks.postgres import PostgresSink

    from tests.fixtures.postgres_tables import read_table, staging_tables

    pipeline, table = f"contract_{uuid.uuid4().hex[:8]}", f"t_{uuid.uuid4().hex[:8]}"
    spec = PostgresSinkConfig(name="out", mode=mode, table=table, connection="c",  # type: ignore[arg-type]
                    keys=KEYS if mode == "upsert" else ())  # fmt: skip

    return Harness(
        make=lambda: PostgresSink(spec, url, pipeline),
        rows=lambda: read_table(url, table),
        leftovers=lambda: staging_tables(url, pipeline),
    )


class TestPostgresAppend(SinkContract):
    @pytest.fixture
    def harness(self, contract_db: str) -> Harness:
        return _postgres(contract_db, "append")


class TestPostgresUpsert(UpsertSinkContract):
    @pytest.fixture
    def harness(self, contract_db: str) -> Harness:
        return _postgres(contract_db, "upsert")


def _delta(spark: Any, ws: Workspace, mode: str) -> Harness:
    from sluice.sinks.delta import STAGING as DELTA_STAGING
    from sluice.sinks.delta import DeltaSink

    from tests.fixtures.delta_tables import read_table

    spec = DeltaSinkConfig(name="out", path=ws.uri("lake"), mode=mode,  # type: ignore[arg-type]
                    keys=KEYS if mode == "upsert" else ())  # fmt: skip
    return Harness(
        make=lambda: DeltaSink(spec, ws.store("lake"), "contract", lambda: spark),
        rows=lambda: read_table(spark, ws.uri("lake")),
        leftovers=lambda: [i.key for i in ws.store("lake").list(DELTA_STAGING)],
    )


class TestDeltaAppend(SinkContract):
    # Delta is slow (a log commit per step): S3 here runs in make chaos; make test covers
    # Delta on S3 through tests/faults/test_sink_matrix.py.
    @pytest.fixture(params=LOCAL_NOW_S3_SLOW)
    def workspace(self, request: pytest.FixtureRequest, tmp_path: Any) -> Workspace:
        return new_workspace(request, tmp_path)

    @pytest.fixture
    def harness(self, spark: Any, workspace: Workspace) -> Harness:
        return _delta(spark, workspace, "append")


class TestDeltaUpsert(UpsertSinkContract):
    @pytest.fixture
    def harness(self, spark: Any, local_workspace: Workspace) -> Harness:
        return _delta(spark, local_workspace, "upsert")
