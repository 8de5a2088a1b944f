"""Tests for the stack.yml and cluster spec loaders (nearfaas.spec)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from nearfaas.spec.errors import Problem, SpecError, SpecWarning
from nearfaas.spec.stack import (SUPPORTED_LANGS, FunctionSpec, NearfaasOptions, Stack, load_stack, parse_duration,
                                 parse_stack)

VALID = """\
version: 1.0
provider:
  name: openfaas
  gateway: http://127.0.0.1:8080
functions:
  resize:
    lang: python3-http
    handler: ./resize
    image: ghcr.io/example/resize:latest
    environment: {read_timeout: 30s, write_timeout: 1m30s, exec_timeout: 500ms, max_inflight: 4, DEBUG: true,
                  RETRIES: 3}
    environment_file: [env.yml]
    labels: {com.openfaas.scale.min: "2", com.openfaas.scale.max: 8, com.openfaas.scale.zero: "true", team: media}
    annotations: {topic: images}
    limits: {memory: 128Mi, cpu: 500m}
    requests: {memory: 64Mi, cpu: "0.25"}
    secrets: [s3-key]
    constraints: ["node.kind == storage"]
    x-nearfaas: {accelerator: dscs, placement: data, inputs: [input, /job/source], chain: [thumb],
                 keep_intermediates: true}
  thumb:
    lang: python3
    handler: ./thumb
"""


def make_project(root: Path) -> Path:
    for name in ("resize", "thumb", "other"):
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "handler.py").write_text("def handle(event, context):\n    return {}\n")
    (root / "nopy").mkdir(exist_ok=True)
    (root / "env.yml").write_text("environment:\n  FROM_FILE: 'yes'\n  RETRIES: 1\n")
    return root


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    return make_project(tmp_path)


@pytest.fixture(scope="module")
def shared_proj(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Module-scoped so hypothesis tests can use it (function-scoped fixtures are not reset per example).
    return make_project(tmp_path_factory.mktemp("fuzz"))


def minimal(**fn: Any) -> dict[str, Any]:
    """A valid stack dict with one function `fn`, overridden by keyword fields."""
    body: dict[str, Any] = {"lang": "python3-http", "handler": "./resize"}
    body.update(fn)
    return {"version": "1.0", "provider": {"name": "openfaas", "gateway": "http://127.0.0.1:8080"},
            "functions": {"fn": body}}


def problems_of(data: dict[str, Any], base: Path) -> list[Problem]:
    with pytest.raises(SpecError) as info:
        parse_stack(data, base)
    return info.value.problems




# ---------------------------------------------------------------- valid stacks

def test_valid_stack_loads_every_field(proj: Path) -> None:
    (proj / "stack.yml").write_text(VALID)
    stack = load_stack(proj / "stack.yml")
    assert (stack.version, stack.provider_name, stack.gateway) == ("1.0", "openfaas", "http://127.0.0.1:8080")
    assert stack.warnings == []
    fn = stack.functions["resize"]
    assert fn.handler_dir == (proj / "resize").resolve() and fn.handler_dir.is_absolute()
    assert (fn.read_timeout, fn.write_timeout, fn.exec_timeout, fn.max_inflight) == (30.0, 90.0, 0.5, 4)
    assert (fn.scale_min, fn.scale_max, fn.scale_zero) == (2, 8, True)
    # inline environment wins over environment_file; values are stringified like OpenFaaS does
    assert fn.environment["RETRIES"] == "3" and fn.environment["FROM_FILE"] == "yes"
    assert fn.environment["DEBUG"] == "true"
    assert fn.labels["com.openfaas.scale.max"] == "8" and fn.annotations == {"topic": "images"}
    assert fn.limits == {"memory": "128Mi", "cpu": "500m"} and fn.requests["cpu"] == "0.25"
    assert fn.secrets == ["s3-key"] and fn.constraints == ["node.kind == storage"]
    assert fn.x == NearfaasOptions("dscs", "data", ["input", "/job/source"], ["thumb"], True)
    assert fn.handler_style == "http" and stack.functions["thumb"].handler_style == "classic"


def test_defaults(proj: Path) -> None:
    fn = parse_stack(minimal(), proj).functions["fn"]
    assert (fn.read_timeout, fn.write_timeout, fn.exec_timeout) == (10.0, 10.0, 10.0)
    assert (fn.max_inflight, fn.scale_min, fn.scale_max, fn.scale_zero) == (0, 1, 5, False)
    assert fn.x == NearfaasOptions() and fn.x.inputs == ["input"] and fn.x.placement == "auto"
    assert fn.environment == {} and fn.secrets == [] and fn.labels == {}
    labels = {"com.openfaas.scale.min": 0, "com.openfaas.scale.max": 1, "com.openfaas.scale.zero": True}
    fn = parse_stack(minimal(labels=labels), proj).functions["fn"]  # numbers and booleans work in labels too
    assert (fn.scale_min, fn.scale_max, fn.scale_zero) == (0, 1, True)


def test_round_trip_through_json(proj: Path) -> None:
    (proj / "stack.yml").write_text(VALID)
    stack = load_stack(str(proj / "stack.yml"))
    wire = json.loads(json.dumps(stack.to_dict()))
    assert Stack.from_dict(wire) == stack
    for fn in stack.functions.values():
        assert FunctionSpec.from_dict(json.loads(json.dumps(fn.to_dict()))) == fn
        assert NearfaasOptions.from_dict(fn.x.to_dict()) == fn.x
    assert load_stack(VALID, base_dir=proj) == stack  # YAML text resolves handlers against base_dir


@pytest.mark.parametrize("lang", sorted(SUPPORTED_LANGS))
def test_every_supported_lang_loads(proj: Path, lang: str) -> None:
    assert parse_stack(minimal(lang=lang), proj).functions["fn"].lang == lang


@pytest.mark.parametrize("text,seconds", [
    ("10s", 10.0), ("1m30s", 90.0), ("500ms", 0.5), ("2m", 120.0), ("1h", 3600.0), ("1.5s", 1.5),
    ("7", 7.0), (15, 15.0), (2.5, 2.5), ("1m0.5s", 60.5),
])
def test_durations(proj: Path, text: Any, seconds: float) -> None:
    assert parse_duration(text) == seconds
    fn = parse_stack(minimal(environment={"exec_timeout": text}), proj).functions["fn"]
    assert fn.exec_timeout == seconds


def test_legacy_provider_and_missing_version_warn(proj: Path) -> None:
    data = minimal()
    del data["version"]
    data["provider"]["name"] = "faas"
    stack = parse_stack(data, proj)
    paths = {w.path for w in stack.warnings}
    assert {"version", "provider.name"} <= paths and all(isinstance(w, SpecWarning) for w in stack.warnings)


def test_unknown_fields_are_warnings_with_suggestions(proj: Path) -> None:
    data = minimal(enviroment={"A": "b"}, build_args={"X": "1"})
    data["functoins"] = {}
    stack = parse_stack(data, proj)
    w = {x.path: x for x in stack.warnings}
    assert "functions.fn.enviroment" in w and "environment" in w["functions.fn.enviroment"].fix
    assert "functoins" in w and "functions" in w["functoins"].fix
    assert "functions.fn.build_args" not in w  # known to faas-cli, just unused here


def test_object_refs_follow_inputs() -> None:
    ref = {"bucket": "b", "key": "k"}
    assert NearfaasOptions().object_refs({"input": ref}) == [ref]
    assert NearfaasOptions().object_refs(ref) == [ref]            # body itself is the reference
    assert NearfaasOptions().object_refs({"input": [ref, ref]}) == [ref, ref]
    opts = NearfaasOptions(inputs=["/job/src", "items.1"])
    assert opts.object_refs({"job": {"src": ref}, "items": [1, ref]}) == [ref, ref]
    assert NearfaasOptions().object_refs({"other": 1}) == []


# ---------------------------------------------------------------- one failing case per rule

@pytest.mark.parametrize("name", ["Resize", "a_b", "x" * 64, "-a", "a-", "a.b", "", "a" * 63, "0-9"])
def test_function_name_must_be_dns_label(proj: Path, name: str) -> None:
    data = minimal()
    data["functions"] = {name: data["functions"]["fn"]}
    if name in ("a" * 63, "0-9"):
        assert list(parse_stack(data, proj).functions) == [name]
        return
    p = problem_at(problems_of(data, proj), f"functions.{name}")
    assert "DNS-1123" in p.message and "lowercase" in p.fix


@pytest.mark.parametrize("lang", ["node", "python27", 3, ["python3"], None])
def test_lang_must_be_supported(proj: Path, lang: Any) -> None:
    p = problem_at(problems_of(minimal(lang=lang), proj), "functions.fn.lang")
    assert all(name in p.message for name in SUPPORTED_LANGS)


def test_image_without_handler_runs_the_image_and_neither_is_missing(proj: Path) -> None:
    data = minimal(image="ghcr.io/x/y:1")
    del data["functions"]["fn"]["handler"]
    assert parse_stack(data, proj).functions["fn"].image_source == "docker://ghcr.io/x/y:1"
    del data["functions"]["fn"]["image"]
    p = problem_at(problems_of(data, proj), "functions.fn.handler")
    assert "missing" in p.message and "image:" in p.fix


@pytest.mark.parametrize("handler,expect", [("./nope", "does not exist"), ("./nopy", "no handler.py"),
                                            ("./env.yml", "does not exist"), (5, "folder path"),
                                            ("./a\0b", "cannot use")])
def test_handler_must_be_folder_with_handler_py(proj: Path, handler: Any, expect: str) -> None:
    p = problem_at(problems_of(minimal(handler=handler), proj), "functions.fn.handler")
    assert expect in p.message
    if isinstance(handler, str) and "\0" not in handler:
        assert str((proj / handler).resolve()) in p.message


@pytest.mark.parametrize("field", ["read_timeout", "write_timeout", "exec_timeout"])
@pytest.mark.parametrize("value", ["ten", "10 parsecs", "-1s", 0, "0s", True, "1m30", ".nan"])
def test_bad_duration_names_field_and_gives_example(proj: Path, field: str, value: Any) -> None:
    p = problem_at(problems_of(minimal(environment={field: value}), proj), f"functions.fn.environment.{field}")
    assert "1m30s" in p.fix and "500ms" in p.fix


@pytest.mark.parametrize("value,ok", [("0", 0), (0, 0), ("12", 12), (-1, None), ("-1", None), ("x", None),
                                      (1.5, None), (True, None)])
def test_max_inflight_non_negative_int(proj: Path, value: Any, ok: int | None) -> None:
    data = minimal(environment={"max_inflight": value})
    if ok is not None:
        assert parse_stack(data, proj).functions["fn"].max_inflight == ok
    else:
        p = problem_at(problems_of(data, proj), "functions.fn.environment.max_inflight")
        assert "0 means unlimited" in p.fix


@pytest.mark.parametrize("labels,path,text", [
    ({"com.openfaas.scale.min": "5", "com.openfaas.scale.max": "2"}, "com.openfaas.scale.min", "above max"),
    ({"com.openfaas.scale.max": "0"}, "com.openfaas.scale.max", "at least 1"),
    ({"com.openfaas.scale.min": "two"}, "com.openfaas.scale.min", "whole number"),
    ({"com.openfaas.scale.min": "-1"}, "com.openfaas.scale.min", "negative"),
    ({"com.openfaas.scale.zero": "maybe"}, "com.openfaas.scale.zero", "true or false"),
])
def test_scale_labels(proj: Path, labels: dict[str, str], path: str, text: str) -> None:
    p = problem_at(problems_of(minimal(labels=labels), proj), f"functions.fn.labels.{path}")
    assert text in p.message


def test_environment_files_merge_under_inline_environment(proj: Path) -> None:
    (proj / "a.yml").write_text("environment:\n  A: from-a\n  B: from-a\n  C: from-a\n")
    (proj / "b.yml").write_text("environment:\n  B: from-b\n  C: from-b\n  exec_timeout: 2m\n")
    fn = parse_stack(minimal(environment_file=["a.yml", "b.yml"], environment={"C": "inline"}), proj).functions["fn"]
    assert (fn.environment["A"], fn.environment["B"], fn.environment["C"]) == ("from-a", "from-b", "inline")
    assert fn.exec_timeout == 120.0
    (proj / "t.yml").write_text("environment:\n  exec_timeout: soon\n")  # errors name the file entry
    problem_at(problems_of(minimal(environment_file=["t.yml"]), proj),
               "functions.fn.environment_file[0].environment.exec_timeout")


@pytest.mark.parametrize("content,expect", [
    (None, "file not found"), ("- a\n", "environment:"), ("just text\n", "environment:"),
    ("environment: [1]\n", "mapping"), ("environment:\n  A: [1, 2]\n", "string"), ("a: b: c\n", "line 1"),
    ("/dev/zero", "regular file"),
])
def test_bad_environment_file(proj: Path, content: str | None, expect: str) -> None:
    name = content if content == "/dev/zero" else "bad.yml"
    if content is not None and name == "bad.yml":
        (proj / "bad.yml").write_text(content)
    problems = problems_of(minimal(environment_file=[name]), proj)
    assert any(p.path.startswith("functions.fn.environment_file[0]") and expect in str(p) for p in problems), problems


@pytest.mark.parametrize("secrets,path", [([1], "secrets[0]"), (["ok", None], "secrets[1]"), ("one", "secrets"),
                                          ({"a": 1}, "secrets"), (["../etc"], "secrets[0]")])
def test_secrets_must_be_names(proj: Path, secrets: Any, path: str) -> None:
    problem_at(problems_of(minimal(secrets=secrets), proj), f"functions.fn.{path}")


@pytest.mark.parametrize("limits,path,fix", [({"memory": "128m"}, "memory", "128Mi"),
                                             ({"memory": "lots"}, "memory", "Mi"), ({"cpu": "fast"}, "cpu", "500m")])
def test_limits(proj: Path, limits: dict[str, str], path: str, fix: str) -> None:
    assert fix in problem_at(problems_of(minimal(limits=limits), proj), f"functions.fn.limits.{path}").fix


@pytest.mark.parametrize("x,path,text", [
    ({"placment": "data"}, "placment", 'did you mean "placement"'),  # unknown keys here are errors
    ({"accelerator": "gpu"}, "accelerator", "dscs"), ({"placement": "edge"}, "placement", "auto"),
    ({"accelerator": "dscs", "placement": "compute"}, "placement", "storage node"),
    ({"inputs": ["a..b"]}, "inputs[0]", "JSON pointer"), ({"inputs": [], "placement": "data"}, "inputs", "at least"),
    ({"keep_intermediates": "sometimes"}, "keep_intermediates", "true or false"), ({"chain": [1]}, "chain[0]", ""),
    ({"inputs": {"a": 1}}, "inputs", "list"),
    ({"triggers": ["photos/incoming/"]}, "triggers[0]", "s3://bucket/prefix/"), ({"triggers": ["s3://Bad_Bucket/"]}, "triggers[0]", "s3://"),
    ({"triggers": ["s3://nearfaas-intermediates/x/"]}, "triggers[0]", "intermediates"), ({"triggers": [7]}, "triggers[0]", ""),
    ({"triggers": ["s3://photos/"], "inputs": ["/job/source"]}, "triggers", 'add "input" to inputs'),
])
def test_x_nearfaas_values(proj: Path, x: dict[str, Any], path: str, text: str) -> None:
    assert text in str(problem_at(problems_of(minimal(**{"x-nearfaas": x}), proj), f"functions.fn.x-nearfaas.{path}"))


def two_functions(chain_a: Any, chain_b: Any = None) -> dict[str, Any]:
    data = minimal(**{"x-nearfaas": {"chain": chain_a}})
    data["functions"]["other"] = {"lang": "python3-http", "handler": "./other"}
    if chain_b is not None:
        data["functions"]["other"]["x-nearfaas"] = {"chain": chain_b}
    return data


def test_chain_must_name_functions_in_the_stack(proj: Path) -> None:
    p = problem_at(problems_of(two_functions(["othr"]), proj), "functions.fn.x-nearfaas.chain[0]")
    assert "othr" in p.message and 'did you mean "other"' in p.fix


def test_chain_cycles_are_errors(proj: Path) -> None:
    problems = problems_of(two_functions(["other"], ["fn"]), proj)
    cycles = [p for p in problems if "cycle" in p.message]
    assert len(cycles) == 1  # reported once, not once per member
    assert "fn -> other -> fn" in cycles[0].message or "other -> fn -> other" in cycles[0].message
    assert "cycle" in problem_at(problems_of(two_functions(["fn"]), proj), "functions.fn.x-nearfaas.chain").message


def test_valid_chain(proj: Path) -> None:
    assert parse_stack(two_functions("other"), proj).functions["fn"].x.chain == ["other"]


def test_version_must_be_1_0(proj: Path) -> None:
    data = minimal()
    data["version"] = "2.0"
    assert "1.0" in problem_at(problems_of(data, proj), "version").fix


@pytest.mark.parametrize("provider,path", [({"name": "lambda"}, "provider.name"),
                                           ({"gateway": 8080}, "provider.gateway"), ("openfaas", "provider")])
def test_provider(proj: Path, provider: Any, path: str) -> None:
    data = minimal()
    data["provider"] = provider
    problem_at(problems_of(data, proj), path)


@pytest.mark.parametrize("text,expect", [
    ("functions:\n  fn:\n    lang: python3-http\n   handler: ./x\n", "line 4"),
    ("functions:\n\tfn: {}\n", "tab"),
    ("functions:\n  fn: {lang: python3-http\n", "line"),
    ("functions:\n  fn: {}\n  fn: {}\n", "duplicate"),
    ("version: 1.0\nfunctions: [\n", "line 3"),
])
def test_yaml_syntax_errors_have_line_and_hint(tmp_path: Path, text: str, expect: str) -> None:
    (tmp_path / "stack.yml").write_text(text)
    with pytest.raises(SpecError) as info:
        load_stack(tmp_path / "stack.yml")
    [p] = info.value.problems
    assert p.path == "stack.yml" and "line" in p.message and p.fix
    assert expect in str(p)


@pytest.mark.parametrize("text", ["", "# only a comment\n", "version: 1.0\n", "version: 1.0\nfunctions: {}\n",
                                  "version: 1.0\nfunctions:\n", "[1, 2]", "just a string"])
def test_empty_or_functionless_files(tmp_path: Path, text: str) -> None:
    with pytest.raises(SpecError) as info:
        load_stack(text, base_dir=tmp_path)
    assert info.value.problems


@pytest.mark.parametrize("source,text", [("nope.yml", "not found"), ("", "directory"), (Path("nope"), "not found")])
def test_missing_file_and_directory(tmp_path: Path, source: Any, text: str) -> None:
    with pytest.raises(SpecError, match=text):
        load_stack(tmp_path / source if source != "nope.yml" else str(tmp_path / source))


def test_all_problems_collected_and_rendered_one_per_line(proj: Path) -> None:
    data = minimal(lang="node", environment={"exec_timeout": "ten"}, secrets=[1])
    data["functions"]["BadName"] = {"lang": "python3-http"}
    data["version"] = 3
    with pytest.raises(SpecError) as info:
        parse_stack(data, proj)
    paths = {p.path for p in info.value.problems}
    assert {"version", "functions.fn.lang", "functions.fn.environment.exec_timeout", "functions.fn.secrets[0]",
            "functions.BadName", "functions.BadName.handler"} <= paths
    lines = str(info.value).splitlines()
    assert len(lines) == len(info.value.problems)
    assert all(": " in line and "(fix: " in line for line in lines)
    assert "functions.fn.environment.exec_timeout: " in str(info.value)
    again = pickle.loads(pickle.dumps(info.value))
    assert again.problems == info.value.problems
    assert json.dumps(info.value.to_dict())


@pytest.mark.parametrize("field", ["lang", "handler", "environment", "environment_file", "labels", "annotations",
                                   "limits", "requests", "secrets", "constraints", "x-nearfaas", "image"])
@pytest.mark.parametrize("junk", [[1, 2], {"a": {"b": 1}}, 42, 3.5, True, "text", {1: 2}, [None], {"k": None}])
def test_wrong_types_anywhere_give_spec_error_naming_field(proj: Path, field: str, junk: Any) -> None:
    data = minimal(**{field: junk})
    try:
        parse_stack(data, proj)
    except SpecError as exc:
        assert any(p.path.startswith(f"functions.fn.{field}") for p in exc.problems), exc.problems


@pytest.mark.parametrize("junk", [None, [], 3, "x", {"functions": []}, {"functions": {"fn": 3}},
                                  {"functions": {"fn": None}}, {1: 2, "functions": {3: {}}}, {"provider": []}])
def test_wrong_top_level_shapes(proj: Path, junk: Any) -> None:
    with pytest.raises(SpecError):
        parse_stack(junk, proj)


def test_function_spec_from_dict_rejects_bad_records() -> None:
    with pytest.raises(SpecError) as info:
        FunctionSpec.from_dict({"name": "x", "lang": 3, "handler_dir": "rel", "read_timeout": "10s",
                                "labels": {"a": 1}, "x": {"placement": "q"}})
    paths = {p.path for p in info.value.problems}
    assert {"function x.lang", "function x.handler_dir", "function x.read_timeout", "function x.labels",
            "function x.x.placement"} <= paths
    with pytest.raises(SpecError):
        FunctionSpec.from_dict([1])
    with pytest.raises(SpecError):
        Stack.from_dict({"functions": {"a": None}})


# ---------------------------------------------------------------- fuzzing: only SpecError may escape

from spec_test_helpers import FUZZ, mutations, problem_at, values  # noqa: E402

VALID_DICT = yaml.safe_load(VALID)
# YAML-ish text: joined tokens that are mostly YAML punctuation plus a few stack keywords.
YAMLISH = st.lists(st.sampled_from(list("abfnx:- \n\t[]{},#&*!|>'\"%@`?.01\\\u00e9")
                                   + ["functions", "lang", "handler", "  ", ": ", "\n  ", "- ", "&a", "*a"]),
                   max_size=40).map("".join)


@FUZZ
@given(data=st.one_of(values, mutations(VALID_DICT)))
def test_fuzz_stack_data_only_raises_spec_error(shared_proj: Path, data: Any) -> None:
    try:
        stack = parse_stack(data, shared_proj)
    except SpecError as exc:
        assert exc.problems and all(isinstance(p.path, str) and p.message for p in exc.problems)
        str(exc)
    else:
        assert Stack.from_dict(json.loads(json.dumps(stack.to_dict()))) == stack


@FUZZ
@given(text=st.one_of(YAMLISH, st.text(max_size=60), YAMLISH.map(lambda s: VALID.replace("python3\n", s + "\n"))))
def test_fuzz_stack_text_only_raises_spec_error(shared_proj: Path, text: str) -> None:
    try:
        load_stack(text + "\n", base_dir=shared_proj)
    except SpecError:
        pass


@FUZZ
@given(data=st.data())
def test_fuzz_function_wire_records(shared_proj: Path, data: st.DataObject) -> None:
    record = parse_stack(VALID_DICT, shared_proj).functions["resize"].to_dict()
    try:
        FunctionSpec.from_dict(data.draw(mutations(record)))
    except SpecError:
        pass


def test_triggers_match_new_objects_by_bucket_and_prefix() -> None:
    opts = NearfaasOptions.from_dict({"triggers": ["s3://photos/incoming/", "s3://logs"]})
    assert opts.triggers == ["s3://photos/incoming/", "s3://logs/"]
    assert opts.triggered_by("photos", "incoming/a.jpg") and opts.triggered_by("logs", "any/key")
    assert not opts.triggered_by("photos", "archive/a.jpg") and not opts.triggered_by("photos-2", "incoming/a.jpg")
    assert NearfaasOptions.from_dict(opts.to_dict()) == opts


def test_a_function_deployed_alone_may_chain_to_one_deployed_later(proj: Path) -> None:
    from nearfaas.spec.stack import parse_stack

    data = two_functions(["later"])
    del data["functions"]["other"]
    with pytest.raises(SpecError):
        parse_stack(data, proj)
    assert parse_stack(data, proj, whole=False).functions["fn"].x.chain == ["later"]


def test_a_function_names_its_namespace(proj: Path) -> None:
    data = minimal(namespace="team-a")
    assert parse_stack(data, proj).functions["fn"].namespace == "team-a"
    assert problem_at(problems_of(minimal(namespace="Team A"), proj), "functions.fn.namespace").fix.startswith("use one of")
