"""Give a local image's configuration its real architecture: `docker save`, the config rewritten, `docker load`
under a new tag (the image ID changes with the config; the layers stay byte for byte).

docker 20.10's `docker import` labels every imported rootfs amd64, whatever its binaries are; an arm64 image so
labelled would run, but could not stand for linux/arm64 in an image index.
    python3 scripts/set-image-arch.py SOURCE ARCH TAG     e.g. ... sha256:ab12... arm64 torchimages/debian:...-arm64
"""

import hashlib
import io
import json
import subprocess
import sys
import tarfile

VARIANTS = {"arm64": "v8"}  # what the OCI image index names for each architecture


def main(source: str, arch: str, tag: str) -> None:
    saved = subprocess.run(["docker", "save", source], capture_output=True, check=True).stdout
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(saved)) as old, tarfile.open(fileobj=out, mode="w") as new:
        manifest = json.loads(old.extractfile("manifest.json").read())
        [entry] = manifest
        replaced = ("manifest.json", "repositories", entry["Config"])
        config = json.loads(old.extractfile(entry["Config"]).read())
        config["architecture"] = arch
        config.pop("variant", None)
        if arch in VARIANTS:
            config["variant"] = VARIANTS[arch]
        body = json.dumps(config, separators=(",", ":")).encode()
        entry["Config"] = f"{hashlib.sha256(body).hexdigest()}.json"
        entry["RepoTags"] = [tag]
        for member in old.getmembers():
            if member.name in replaced:
                continue
            new.addfile(member, old.extractfile(member) if member.isfile() else None)
        for name, data in ((entry["Config"], body), ("manifest.json", json.dumps(manifest).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            new.addfile(info, io.BytesIO(data))
    subprocess.run(["docker", "load", "--quiet"], input=out.getvalue(), capture_output=True, check=True)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
