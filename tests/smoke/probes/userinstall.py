"""Install a package as the image's user, the way a notebook's `%pip install` does, and print where it went (JSON).

The package is a wheel made here (no index is reached); it is uninstalled again before this prints."""

import base64
import hashlib
import json
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

NAME, VERSION = "torchimages_userinstall_probe", "1.0"


def record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def make_wheel(folder):
    info = f"{NAME}-{VERSION}.dist-info"
    files = {
        f"{NAME}/__init__.py": b"",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: torchimages\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "\n".join([record_line(path, data) for path, data in files.items()] + [f"{info}/RECORD,,", ""])
    path = str(Path(folder) / f"{NAME}-{VERSION}-py3-none-any.whl")
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr(f"{info}/RECORD", record)
    return path


def pip(*args):
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, check=False)


with tempfile.TemporaryDirectory() as folder:
    installed = pip("install", "--no-index", "--no-deps", make_wheel(folder))
where = None
if installed.returncode == 0:
    where = subprocess.run([sys.executable, "-c", f"import {NAME}, os; print(os.path.dirname({NAME}.__file__))"],
                           capture_output=True, text=True, check=False).stdout.strip()
    pip("uninstall", "--yes", NAME)
print(json.dumps({
    "returncode": installed.returncode,
    "output": (installed.stdout + installed.stderr)[-2000:],
    "where": where,
    "environment": sysconfig.get_paths()["purelib"],
    "venv": sys.prefix != sys.base_prefix,
}))
