"""Image-only functions in the stack loader (spec/stack.py, issue 23): where the image comes from
is resolved and checked at deploy, so a missing or broken image is a 400 naming ``image``."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from nearfaas.spec.errors import SpecError
from nearfaas.spec.stack import IMAGE_ONLY_HANDLER, FunctionSpec, parse_stack


def stack(**fn) -> dict:
    return {"version": "1.0", "provider": {"name": "openfaas"}, "functions": {"fn": fn}}


def problems(data: dict, base: Path):
    with pytest.raises(SpecError) as info:
        parse_stack(data, base)
    return info.value.problems


def layout(folder: Path, *tags: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    manifests = [{"digest": f"sha256:{i:064x}", "annotations": {"org.opencontainers.image.ref.name": t}} for i, t in enumerate(tags)]
    (folder / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": manifests}))
    return folder


def archive(path: Path, *names: str) -> Path:
    with tarfile.open(path, "w") as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = 2
            tar.addfile(info, io.BytesIO(b"{}"))
    return path


def test_an_image_only_function_is_accepted_with_any_lang(tmp_path):
    layout(tmp_path / "img", "v1")
    spec = parse_stack(stack(image="oci:./img:v1"), tmp_path).functions["fn"]
    assert spec.image == "oci:./img:v1" and spec.image_source == f"oci:{tmp_path / 'img'}:v1"
    assert spec.lang == "dockerfile" and spec.handler_dir == IMAGE_ONLY_HANDLER and not IMAGE_ONLY_HANDLER.exists()
    assert parse_stack(stack(image="oci:./img:v1", lang="python3"), tmp_path).functions["fn"].lang == "python3"
    again = FunctionSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again.image_source == spec.image_source


@pytest.mark.parametrize("image, source", [
    ("ghcr.io/openfaas/figlet:latest", "docker://ghcr.io/openfaas/figlet:latest"),
    ("figlet", "docker://figlet"),
    ("docker://registry.local:5000/fn:1", "docker://registry.local:5000/fn:1"),
])
def test_a_registry_reference_is_left_for_the_node(tmp_path, image, source):
    assert parse_stack(stack(image=image), tmp_path).functions["fn"].image_source == source


def test_archives_are_recognised_by_what_they_hold(tmp_path):
    archive(tmp_path / "d.tar", "manifest.json", "abc.tar")
    archive(tmp_path / "o.tar", "oci-layout", "index.json", "blobs/sha256/x")
    assert parse_stack(stack(image="./d.tar"), tmp_path).functions["fn"].image_source == f"docker-archive:{tmp_path / 'd.tar'}"
    assert parse_stack(stack(image=str(tmp_path / "o.tar")), tmp_path).functions["fn"].image_source == f"oci-archive:{tmp_path / 'o.tar'}"
    assert parse_stack(stack(image="docker-archive:d.tar"), tmp_path).functions["fn"].image_source.startswith("docker-archive:/")


@pytest.mark.parametrize("image, words", [
    ("oci-archive:./missing.tar", "does not exist"),
    ("docker-archive:./broken.tar", "not a usable image"),
    ("oci-archive:./docker.tar", "no index.json and oci-layout"),
    ("oci:./img:v2", "no image tagged 'v2'"),
    ("oci:./two", "holds 2 images"),
    ("oci-archive:./img", "is a folder"),
])
def test_a_missing_or_broken_image_names_the_field_and_the_fix(tmp_path, image, words):
    (tmp_path / "broken.tar").write_bytes(b"\x00garbage" * 300)
    archive(tmp_path / "docker.tar", "manifest.json")
    layout(tmp_path / "img", "v1")
    layout(tmp_path / "two", "a", "b")
    (problem,) = problems(stack(image=image), tmp_path)
    assert problem.path == "functions.fn.image" and words in problem.message, problem
    assert "oci-archive:" in problem.fix and "docker-archive:" in problem.fix


def test_a_handler_keeps_the_image_informational(tmp_path):
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "handler.py").write_text("def handle(event, context):\n    return 'ok'\n")
    spec = parse_stack(stack(image="ghcr.io/x/y:1", handler="./h", lang="python3-http"), tmp_path).functions["fn"]
    assert spec.image == "ghcr.io/x/y:1" and spec.image_source == "" and "image_source" not in spec.to_dict()


def test_neither_handler_nor_image_says_both_ways(tmp_path):
    (problem,) = problems(stack(lang="python3-http"), tmp_path)
    assert problem.path == "functions.fn.handler" and "image:" in problem.fix


def test_an_image_function_cannot_target_the_fast_path(tmp_path):
    paths = [p.path for p in problems(stack(image="figlet", **{"x-nearfaas": {"target": "fastpath", "fastpath": {"module": "m.wasm"}}}),
                                      tmp_path)]
    assert "functions.fn.x-nearfaas" in paths
