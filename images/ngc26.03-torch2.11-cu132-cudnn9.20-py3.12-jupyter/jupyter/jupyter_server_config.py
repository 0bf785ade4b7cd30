# /etc/jupyter/jupyter_server_config.py: read by Jupyter Server however it is started (the image's
# default command, `jupyter lab`, `jupyter notebook`, `jupyter server`), so every form serves the
# same way: on all interfaces of the container, from /workspace, with a token, never as root.
import os
import secrets

c = get_config()  # noqa: F821
c.ServerApp.ip = "0.0.0.0"
c.ServerApp.port = int(os.environ.get("JUPYTER_PORT") or 8888)
c.ServerApp.open_browser = False
c.ServerApp.root_dir = os.environ.get("JUPYTER_ROOT") or "/workspace"
c.ServerApp.allow_root = False

# Authentication is always on: the token comes from JUPYTER_TOKEN (Jupyter Server reads it), else
# one is generated here and printed once. Setting it in the environment keeps it the same when
# this file is read again in the same process.
if not os.environ.get("JUPYTER_TOKEN"):
    os.environ["JUPYTER_TOKEN"] = secrets.token_hex(24)
    print(f"JupyterLab token (generated; set JUPYTER_TOKEN to choose your own): {os.environ['JUPYTER_TOKEN']}",
          flush=True)
