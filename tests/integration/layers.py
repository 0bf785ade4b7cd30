"""What an image's exported layers hold: every file of every layer (and the image config) searched for secrets, for
the tests that prove no build input (an index token, a proxy password) reaches an image."""

from __future__ import annotations

import io
import json
import posixpath
import tarfile
from collections import Counter
from dataclasses import dataclass, field

import docker

from .conftest import SECRET_PROXY_PASSWORD, SECRET_TOKEN, engine_client

SECRETS = (SECRET_TOKEN.encode(), SECRET_PROXY_PASSWORD.encode())


@dataclass
class Scan:
    found: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    layer_files: list[list[str]] = field(default_factory=list)  # the files of each layer, bottom first
    layers: int = 0
    configs: int = 0


def scan_layers(api: docker.APIClient, tag: str, secrets: tuple[bytes, ...]) -> Scan:
    """Every file of every exported layer of `tag` (and its image config), searched for the secrets."""
    return scan_images(api, [tag], secrets)[tag]


def scan_images(api: docker.APIClient, tags: list[str], secrets: tuple[bytes, ...]) -> dict[str, Scan]:
    """Every file of every layer of each image (and each image config), searched for the secrets; the images are
    exported together (`docker save A B C`), so a layer they share is read once."""
    # its own client: the engine may take longer than the shared client's 30 s before the export's first bytes
    exporter = engine_client(timeout=900)
    assert exporter is not None, "the engine stopped answering"
    response = exporter._get(exporter._url("/images/get"), params={"names": tags}, stream=True)
    exporter._raise_for_status(response)
    read: dict[str, Scan] = {}  # member of the export -> what it holds
    links: dict[str, str] = {}  # the export links a layer that recurs to its first copy
    with tarfile.open(fileobj=io.BytesIO(b"".join(response.iter_content(2**20)))) as outer:
        for member in outer.getmembers():
            if member.isfile():
                read[member.name] = scan_member(member.name, outer.extractfile(member).read(), secrets)
            elif member.issym():
                links[member.name] = posixpath.normpath(posixpath.join(posixpath.dirname(member.name), member.linkname))
        manifest = json.loads(outer.extractfile("manifest.json").read())
    read.update({name: read[target] for name, target in links.items() if target in read})
    scans = {}
    for image in manifest:
        scan = Scan()
        for name in [image["Config"], *dict.fromkeys(image["Layers"])]:
            part = read[name]
            scan.found += part.found
            scan.files += part.files
            if part.layers:
                scan.layer_files.append(part.files)
            scan.layers += part.layers
            scan.configs += part.configs
        scans.update(dict.fromkeys(image["RepoTags"], scan))
    assert set(tags) <= set(scans), f"the export holds {sorted(scans)}, not {tags}"
    return scans


def scan_member(name: str, data: bytes, secrets: tuple[bytes, ...]) -> Scan:
    """One member of an export: a layer (every file in it searched) or a JSON document (searched whole)."""
    scan = Scan()
    if name.endswith("layer.tar") or data[:262][257:262] == b"ustar":
        scan.layers = 1
        with tarfile.open(fileobj=io.BytesIO(data)) as layer:
            for entry in layer.getmembers():
                if entry.isfile():
                    content = layer.extractfile(entry).read()
                    scan.files.append(entry.name)
                    scan.found += [f"{name}:{entry.name}" for s in secrets if s in content]
    else:
        scan.configs = int(name.endswith(".json") and b'"rootfs"' in data)
        scan.found += [name for s in secrets if s in data]
    return scan


def files_in_two_layers(scan: Scan, under: str = "opt/venv/") -> dict[str, int]:
    """Files of the Python environment (`under`) that more than one layer of the image holds (a file stored twice),
    with how many hold it. (The OS's files are left out: apt and useradd rewrite /etc/group and dpkg's status.)"""
    held = Counter(name for files in scan.layer_files
                   for name in {name.removeprefix("./") for name in files} if name.startswith(under))
    return {name: count for name, count in held.items() if count > 1}


def layer_holding(scan: Scan, suffix: str) -> int:
    """The index (bottom first) of the one layer holding a file whose path ends with `suffix`."""
    [index] = [i for i, files in enumerate(scan.layer_files) if any(name.endswith(suffix) for name in files)]
    return index


def assert_layered_by_change(scans: dict[str, Scan], tags: dict[str, str], pieces: list[str]) -> None:
    """An entry's images (variant -> tag) as the layered environment lays them out: in the base, the torch layer in its
    `pieces` (render.environment_pieces), each a layer of the environment's files only, torch in its own and numpy in
    the last; the entry's `pip:` packages in the next layer, then only configuration; in every image, no file of the
    environment in two layers (a variant adds its own files only)."""
    for variant, tag in tags.items():
        twice = files_in_two_layers(scans[tag])
        assert not twice, f"{variant}: {len(twice)} files in more than one layer, e.g. {sorted(twice)[:10]}"
    scan = scans[tags["base"]]
    torch, numpy = (layer_holding(scan, f"/site-packages/{name}/__init__.py") for name in ("torch", "numpy"))
    first = numpy - len(pieces) + 1
    assert torch == first + pieces.index("torch"), (
        f"torch is in layer {torch}, numpy in layer {numpy}: not the pieces {pieces} in that order")
    outside = [name for files in scan.layer_files[first:numpy + 1] for name in files
               if not name.removeprefix("./").startswith(("opt/venv/", "opt/python/", "etc/pip/"))]
    assert not outside, f"the torch layer's pieces hold files outside the environment: {outside[:10]}"
    later = [name for files in scan.layer_files[numpy + 2:] for name in files if "/site-packages/" in name]
    assert not later, f"the layers after the environment's hold packages: {later[:10]}"
