"""The run-request model: one declaration, from which the trigger form, ``sluice run``'s
options and the monitor's forms are derived; its shape checks name the field and say why.

No Spark, no storage: these are checks of a request's shape only (``resolve`` against a
checkpoint store is covered by test_rewind.py, test_retention.py and test_upgrade.py)."""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from sluice.airflow.params import airflow_params
from sluice.cli import add_request_options, request_conf
from sluice.protocol.request import InvalidRunRequest, RunRequest

RULE = "1-100 letters, digits, '_', '.', '-', starting with a letter or digit"
MISSING = "['fail', 'earliest']"
EPOCH = "a committed epoch"
OBJECT = '{"after_key": "part-0003.jsonl"}'


def problems(conf: dict[str, Any]) -> list[str]:
    with pytest.raises(InvalidRunRequest) as caught:
        RunRequest.from_conf("clicks", conf)
    assert caught.value.pipeline == "clicks"
    assert "clicks" in str(caught.value) and "nothing was written" in str(caught.value)
    return caught.value.problems


@pytest.mark.parametrize(
    ("conf", "expected"),
    [
        ({"epoch": 0, "restore_from": "checkpoint"}, ["epoch: 0 is not a whole number >= 1"]),
        ({"max_records": -3}, ["max_records: -3 is not a whole number >= 1"]),
        ({"max_records": True}, ["max_records: True is not a whole number >= 1"]),
        ({"max_records": "10"}, ["max_records: '10' is not a whole number >= 1"]),
        (
            {"restore_from": "bogus", "epoch": 3},
            [
                "restore_from: 'bogus' is not one of "
                "['latest', 'checkpoint', 'savepoint', 'offsets']",
                "epoch: only used with restore_from=checkpoint, not 'bogus'",
            ],
        ),
        (
            {"restore_from": "offsets", "offsets": [1]},
            [f"offsets: expected a JSON object such as {OBJECT}, got list [1]"],
        ),
        ({"allow_state_drop": "yes"}, ["allow_state_drop: expected true or false, got 'yes'"]),
        ({"on_missing_offsets": "x"}, [f"on_missing_offsets: 'x' is not one of {MISSING}"]),
        (
            {"restore_from": "savepoint", "savepoint": "ok\n"},
            [f"savepoint: 'ok\\n' is not a savepoint name ({RULE})"],
        ),
        ({"take_savepoint": "a/b"}, [f"take_savepoint: 'a/b' is not a savepoint name ({RULE})"]),
        (
            {"restore_from": "checkpoint"},
            [f"epoch: required with restore_from=checkpoint ({EPOCH})"],
        ),
        ({"restore_from": "offsets"}, ["offsets: required with restore_from=offsets"]),
        ({"epoch": 2}, ["epoch: only used with restore_from=checkpoint, not 'latest'"]),
        (
            {"restore_from": "savepoint", "epoch": 2},
            [
                "epoch: only used with restore_from=checkpoint, not 'savepoint'",
                "savepoint: required with restore_from=savepoint (a savepoint name)",
            ],
        ),
    ],
)
def test_a_bad_shape_names_the_field_and_why(conf: dict[str, Any], expected: list[str]) -> None:
    assert problems(conf) == expected


def test_every_problem_is_reported_at_once() -> None:
    found = problems({"max_records": 0, "epoch": "x", "take_savepoint": "../x", "restore_from": 1})
    assert [p.split(":", 1)[0] for p in found] == [
        "max_records",
        "restore_from",
        "epoch",
        "take_savepoint",
    ]


def test_empty_values_and_airflows_own_keys_are_not_given() -> None:
    """The trigger form sends "" and null for fields left empty, and Airflow adds keys of its
    own: a scheduled run's conf is "continue"."""
    conf = {"max_records": "", "epoch": None, "restore_from": "", "savepoint": "", "x": 1}
    request = RunRequest.from_conf("clicks", conf)
    assert request == RunRequest()
    assert not request.asks_anything
    assert not RunRequest.from_conf("clicks", {"allow_state_drop": True}).asks_anything
    rewind = RunRequest.from_conf("clicks", {"restore_from": "checkpoint", "epoch": 2})
    assert (rewind.restore_from, rewind.epoch, rewind.asks_anything) == ("checkpoint", 2, True)


def test_the_trigger_form_is_derived_from_the_model() -> None:
    params = airflow_params()
    assert list(params) == list(RunRequest.model_fields)
    assert params["restore_from"]["default"] == "latest"
    assert params["restore_from"]["enum"] == ["latest", "checkpoint", "savepoint", "offsets"]
    assert params["epoch"] == {
        "default": None,
        "type": ["null", "integer"],
        "minimum": 1,
        "title": "Checkpoint epoch",
        "description": RunRequest.model_fields["epoch"].description,
    }
    assert params["offsets"]["type"] == ["null", "object"]
    assert params["allow_state_drop"]["type"] == "boolean"
    assert params["on_missing_offsets"]["enum"] == ["fail", "earliest"]
    assert params["lookup_versions"]["enum"] == ["pinned", "current"]
    for name, form in params.items():  # every field has a title and a description
        assert form["title"] and form["description"], name


def test_airflow_refuses_what_the_model_refuses_in_the_form() -> None:
    """The form's JSON schema (checked by Airflow before a run is created) refuses an epoch
    of 0 and an unknown restore_from, as the model does."""
    from airflow.sdk import Param
    from airflow.sdk.definitions.param import ParamsDict
    from airflow.sdk.exceptions import ParamValidationError

    params = ParamsDict({n: Param(f.pop("default"), **f) for n, f in airflow_params().items()})
    params.validate()  # the defaults are a valid scheduled run
    for name, value in (("epoch", 0), ("restore_from", "bogus"), ("max_records", "x")):
        bad = ParamsDict({n: Param(f.pop("default"), **f) for n, f in airflow_params().items()})
        with pytest.raises(ParamValidationError, match=f"param {name}"):
            bad[name] = value  # Airflow checks a value as it is set


def test_sluice_runs_options_are_derived_from_the_model() -> None:
    parser = argparse.ArgumentParser()
    add_request_options(parser)
    flags = {a.dest: a.option_strings for a in parser._actions if a.dest != "help"}
    assert flags == {
        "restore_from": ["--restore-from"],
        "epoch": ["--epoch"],
        "offsets": ["--offsets"],
        "savepoint": ["--savepoint"],
        "allow_state_drop": ["--allow-state-drop"],
        "on_missing_offsets": ["--on-missing-offsets"],
        "lookup_versions": ["--lookup-versions"],
    }
    args = parser.parse_args(["--restore-from", "offsets", "--offsets", '{"after_key": "b"}'])
    request = RunRequest.from_conf("clicks", request_conf("clicks", args))
    assert (request.restore_from, request.offsets) == ("offsets", {"after_key": "b"})
    with pytest.raises(SystemExit):  # argparse refuses a choice the model does not have
        parser.parse_args(["--restore-from", "yesterday"])
    args = parser.parse_args(["--restore-from", "offsets", "--offsets", "{nope"])
    with pytest.raises(InvalidRunRequest, match="--offsets: not JSON"):
        request_conf("clicks", args)


def test_spec_run_request_and_serve_report_the_same_problem_type() -> None:
    """One ``Problem(field, message, fix)`` for a spec, a run request and a serve request."""
    from sluice.exceptions import Problem
    from sluice.serve.model import AttemptRequest, BadRequest
    from sluice.spec import SpecError, parse_spec

    with pytest.raises(InvalidRunRequest) as request:
        RunRequest.from_conf("clicks", {"epoch": 0, "restore_from": "checkpoint"})
    assert request.value.details == (Problem("epoch", "0 is not a whole number >= 1"),)
    with pytest.raises(SpecError) as spec:
        parse_spec({"name": "x"})
    assert spec.value.problems and all(type(p) is Problem for p in spec.value.problems)
    with pytest.raises(BadRequest) as serve:
        AttemptRequest.from_dict({"spec": "x.yaml", "epoch": 0})
    assert serve.value.details and all(type(p) is Problem for p in serve.value.details)
    assert [p.field for p in serve.value.details] == ["epoch"]
