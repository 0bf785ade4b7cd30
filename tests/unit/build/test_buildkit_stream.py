"""The BuildKit backend. Which docker CLI can build with BuildKit, its plain progress read into the same build
events and one-message failures as the classic builder's, build arguments kept off the command line, and Ctrl-C.
The streams below are what Debian's docker.io 20.10 client printed on this project's machines; the CLIs are small
scripts that print them."""

from __future__ import annotations

import stat
import threading
import time
from pathlib import Path

import pytest

from torchimages.build import buildkit
from torchimages.build.buildkit import BuildKitBuilder, BuildKitCli, StreamState, handle_line
from torchimages.engine import BuildOutcome
from torchimages.errors import UserError
from torchimages.events import StageEvent

SUCCESS = """\
#1 [internal] load build definition from Dockerfile
#1 sha256:5a480058fdfc77dd57276a7df9661500bd13720e27165c2bcca64064ef966723
#1 transferring dockerfile: 350B done
#1 DONE 0.0s

#4 [system 1/2] FROM docker.io/torchimages/debian:bookworm-minbase
#4 DONE 0.0s

#5 [system 2/2] RUN echo sys > /sys.txt
#5 CACHED

#6 [builder 1/1] RUN mkdir /opt/v && echo hi > /opt/v/x
#6 0.286 building with a token
#6 DONE 0.3s

#7 [stage-2 1/2] COPY --from=builder /opt/v /opt/v
#7 DONE 0.0s

#9 exporting to image
#9 writing image sha256:e301bbbfc620b9bfc01e5fab1d4ffb3adada303967694bd076656aebc0d1700e done
#9 naming to docker.io/library/bk:1 done
#9 DONE 0.0s
"""

FAILURE = """\
#5 [2/4] RUN echo one && echo two >&2
#5 0.229 two
#5 0.229 one
#5 DONE 0.2s

#6 [3/4] RUN echo about to fail; ls /nonexistent
#6 0.312 about to fail
#6 0.315 ls: cannot access '/nonexistent': No such file or directory
#6 ERROR: executor failed running [/bin/sh -c echo about to fail; ls /nonexistent]: exit code: 2
------
 > [3/4] RUN echo about to fail; ls /nonexistent:
------
executor failed running [/bin/sh -c echo about to fail; ls /nonexistent]: exit code: 2
"""
IMAGE_ID = "sha256:" + "e3" * 32  # what a real CLI writes into --iidfile


def read(stream: str) -> tuple[StreamState, list[StageEvent]]:
    events: list[StageEvent] = []
    state = StreamState(BuildOutcome("img", "t"))
    for line in stream.splitlines():
        handle_line(line, "img", state, events.append)
    return state, events


def test_a_plain_stream_gives_steps_with_their_stage_and_the_output_as_log() -> None:
    state, events = read(SUCCESS)
    steps = [(e.message, e.step, e.steps) for e in events if e.kind == "step"]
    assert steps == [("system: FROM docker.io/torchimages/debian:bookworm-minbase", 1, 2),
                     ("system: RUN echo sys > /sys.txt", 2, 2),
                     ("builder: RUN mkdir /opt/v && echo hi > /opt/v/x", 1, 1),
                     ("stage-2: COPY --from=builder /opt/v /opt/v", 1, 2)]
    logs = [e.message for e in events if e.kind == "log"]
    assert "#6 0.286 building with a token" in logs and not any(line.endswith("DONE 0.0s") for line in logs)
    assert list(state.tail) == ["building with a token"] and state.outcome.error is None


def test_a_failed_step_is_named_with_its_error_and_last_output() -> None:
    state, _ = read(FAILURE)
    assert state.outcome.step == "[3/4] RUN echo about to fail; ls /nonexistent"
    assert state.outcome.error == "executor failed running [/bin/sh -c echo about to fail; ls /nonexistent]: exit code: 2"
    assert list(state.tail)[-2:] == ["about to fail", "ls: cannot access '/nonexistent': No such file or directory"]


HOSTILE_STREAM = """\
#5 [1/99999999999999999999] RUN echo \x1b]0;owned\x07
#5 0.1 \x1b[2J$(id) `reboot`
#5 [stage 2/x] not a step
#77 ERROR: \x1b[31mdenied\x07\x08\x08FAKE: build succeeded
#9 writing image sha256:zz done
"""


def test_hostile_stream_lines_are_read_as_text_and_shown_escaped() -> None:
    """The CLI's output is what a build step printed: odd step numbers, escape sequences and shell text are read as
    text (never run), the error is the line's, and the view shows it escaped on one line."""
    import io

    from torchimages.progress import PlainProgress

    state, events = read(HOSTILE_STREAM + "\n" + "x" * 100_000)
    assert [(e.step, e.steps) for e in events if e.kind == "step"] == [(1, 99999999999999999999)]
    assert state.outcome.error == "\x1b[31mdenied\x07\x08\x08FAKE: build succeeded" and state.outcome.image_id is None
    shown = io.StringIO()
    PlainProgress(shown)(StageEvent("img", "failed", state.outcome.error))
    assert not {"\x1b", "\x07", "\x08"} & set(shown.getvalue()) and shown.getvalue().count("\n") == 1


# buildx makes no attestations of its own: on the containerd store they would make each image an index
NO_ATTESTATIONS = ("--provenance=false", "--sbom=false")


def fake_docker(folder: Path, version: str, *, buildx: bool = False, script: str = "") -> Path:
    """A docker CLI stand-in: `--version`, `buildx version` (answered when `buildx`), and a build running `script`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "docker"
    path.write_text(f"""#!/usr/bin/env bash
if [ "$1" = --version ]; then echo "Docker version {version}, build abc"; exit 0; fi
if [ "$1" = buildx ] && [ "$2" = version ]; then {'echo "github.com/docker/buildx v0.17.1"; exit 0' if buildx else 'exit 1'}; fi
{script}
""")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_the_cli_is_one_with_buildx_or_a_client_before_23(tmp_path: Path) -> None:
    modern = fake_docker(tmp_path / "modern", "28.2.2")
    old = fake_docker(tmp_path / "old", "20.10.24+dfsg1")
    with_buildx = fake_docker(tmp_path / "buildx", "27.3.1", buildx=True)

    found = buildkit.find_cli(f"{modern.parent}:{old.parent}")
    assert found == BuildKitCli(str(old), "20.10.24+dfsg1", buildx=False)
    assert found.command() == [str(old), "build"]
    found = buildkit.find_cli(f"{modern.parent}:{with_buildx.parent}:{old.parent}")
    assert found.buildx and found.command() == [str(with_buildx), "buildx", "build", "--load", *NO_ATTESTATIONS]

    with pytest.raises(UserError) as refused:
        buildkit.find_cli(f"{modern.parent}:{tmp_path / 'empty'}")
    message = str(refused.value)
    assert f"{modern} 28.2.2 (no buildx plugin" in message and "--builder classic" in message, message


def test_a_path_of_odd_entries_and_odd_clis_is_searched_without_a_traceback(tmp_path: Path) -> None:
    """PATH is the environment's: empty entries, a folder named docker, a docker that may not be run, and CLIs whose
    --version says something odd are passed over (each named), and a usable one later on PATH is still found."""
    (tmp_path / "folder" / "docker").mkdir(parents=True)
    (tmp_path / "plain" / "docker").parent.mkdir()
    (tmp_path / "plain" / "docker").write_text("#!/bin/sh\necho 'Docker version 20.10.24'\n")  # not executable
    odd = [fake_docker(tmp_path / f"odd{n}", version)
           for n, version in enumerate(("28.2.2-beta", "28-beta", "2x.1", "\x1b]0;x\x07"))]
    old = fake_docker(tmp_path / "old", "20.10.24+dfsg1")
    search = ":".join(["", str(tmp_path / "folder"), str(tmp_path / "plain"), *(str(o.parent) for o in odd), "",
                       str(old.parent)])
    assert buildkit.find_cli(search) == BuildKitCli(str(old), "20.10.24+dfsg1", buildx=False)
    with pytest.raises(UserError) as refused:
        buildkit.find_cli(search.removesuffix(str(old.parent)))
    message = str(refused.value)
    assert f"{odd[0]} 28.2.2-beta (no buildx plugin" in message, message
    assert all(f"{cli} (does not answer)" in message for cli in odd[1:]), message
    assert "\x1b" not in message and "\n" not in message


class Engine:
    no_cache = False


def builder_running(script: str, tmp_path: Path, *, stop_grace: float = 20.0) -> BuildKitBuilder:
    cli = fake_docker(tmp_path / "cli", "20.10.24", script=script)
    return BuildKitBuilder(Engine(), BuildKitCli(str(cli), "20.10.24", buildx=False),  # type: ignore[arg-type]
                           stop_grace=stop_grace)


def test_a_build_reads_the_image_id_and_keeps_build_args_off_the_command_line(tmp_path: Path) -> None:
    record = tmp_path / "argv"
    script = f"""printf '%s\\n' "$@" > {record}; printf 'TOKEN=%s\\n' "$PIP_INDEX_URL" >> {record}
while [ $# -gt 0 ]; do [ "$1" = --iidfile ] && echo {IMAGE_ID} > "$2"; shift; done
cat <<'STREAM'
{SUCCESS}STREAM
"""
    events: list[StageEvent] = []
    outcome = builder_running(script, tmp_path).build(
        "img", tmp_path, "r.example/x:1", buildargs={"PIP_INDEX_URL": "https://ci:s3cret@pypi.example/simple"},
        emit=events.append, cancel=threading.Event(), labels={"io.torchimages.content-digest": "sha256:1"},
        cache_from=["r.example/x:0"])
    assert outcome.ok and outcome.image_id == IMAGE_ID, outcome
    argv = record.read_text().splitlines()
    assert "--build-arg=PIP_INDEX_URL" in argv and "--progress=plain" in argv and "r.example/x:1" in argv
    assert "--label=io.torchimages.content-digest=sha256:1" in argv and "--cache-from=r.example/x:0" in argv
    assert not any("s3cret" in arg for arg in argv[:-1]), "a build argument's value is on the command line"
    assert argv[-1] == "TOKEN=https://ci:s3cret@pypi.example/simple", "the value travels in the environment"
    assert sum(e.kind == "step" for e in events) == 4


def test_a_context_with_dockerfile_buildkit_gets_its_index_urls_as_a_secret(tmp_path: Path) -> None:
    context = tmp_path / "context"
    context.mkdir()
    (context / "Dockerfile.buildkit").write_text("FROM scratch\n")
    record = tmp_path / "argv"
    script = f"""printf '%s\\n' "$@" > {record}
for arg in "$@"; do case "$arg" in --secret=*) src="${{arg##*src=}}"; stat -c 'mode=%a' "$src" >> {record};
    cat "$src" >> {record};; esac; done
printf 'ENV_BUILD_ENV=%s\\n' "$BUILD_ENV" >> {record}
while [ $# -gt 0 ]; do [ "$1" = --iidfile ] && echo {IMAGE_ID} > "$2"; shift; done
"""

    def build(index: str) -> list[str]:
        outcome = builder_running(script, tmp_path).build(
            "img", context, "t", buildargs={"PIP_INDEX_URL": index, "OFFLINE": "1", "APT_MIRROR": "http://deb.example"},
            emit=lambda e: None, cancel=threading.Event())
        assert outcome.ok, outcome
        return record.read_text().splitlines()

    argv = build("https://ci:s3cret@pypi.example/simple")
    assert argv[argv.index("--file") + 1] == str(context / "Dockerfile.buildkit")
    [secret] = [arg for arg in argv if arg.startswith("--secret=")]
    assert secret.startswith("--secret=id=build-env,src=") and not Path(secret.split("src=")[1]).exists(), \
        "the secret file is removed after the build"
    assert "mode=600" in argv
    assert "export OFFLINE=1" in argv and "export PIP_INDEX_URL=https://ci:s3cret@pypi.example/simple" in argv
    assert "--build-arg=APT_MIRROR" in argv and "--build-arg=BUILD_ENV" in argv
    assert "--build-arg=PIP_INDEX_URL" not in argv and "--build-arg=OFFLINE" not in argv
    [fingerprint] = [line for line in argv if line.startswith("ENV_BUILD_ENV=")]
    assert "s3cret" not in fingerprint and fingerprint.startswith("ENV_BUILD_ENV=sha256:")
    assert [line for line in build("https://ci:other@pypi.example/simple") if line.startswith("ENV_BUILD_ENV=")] == \
        [fingerprint], "a new password alone does not rebuild"
    assert [line for line in build("https://ci:s3cret@mirror.example/simple") if line.startswith("ENV_BUILD_ENV=")] != \
        [fingerprint], "another index does"


def test_a_failed_build_has_no_image_and_one_error(tmp_path: Path) -> None:
    script = f"cat <<'STREAM'\n{FAILURE}STREAM\nexit 1\n"
    outcome = builder_running(script, tmp_path).build("img", tmp_path, "t", buildargs={}, emit=lambda e: None,
                                                      cancel=threading.Event())
    assert not outcome.ok and outcome.image_id is None and "exit code: 2" in (outcome.error or "")
    assert outcome.step == "[3/4] RUN echo about to fail; ls /nonexistent"


def stopped(builder: BuildKitBuilder, tmp_path: Path) -> tuple[BuildOutcome, float]:
    """Start a build, stop it as Ctrl-C or SIGTERM does: its outcome and how long the stop took."""
    cancel = threading.Event()
    result: list[BuildOutcome] = []
    thread = threading.Thread(target=lambda: result.append(builder.build(
        "img", tmp_path, "t", buildargs={}, emit=lambda e: None, cancel=cancel)))
    thread.start()
    for _ in range(100):
        if builder.running:
            break
        time.sleep(0.05)
    time.sleep(0.3)
    started = time.monotonic()
    cancel.set()
    builder.stop_builds()
    thread.join(timeout=30)
    assert not thread.is_alive(), "the build was still waited for"
    return result[0], time.monotonic() - started


def test_stop_interrupts_the_cli_and_the_build_counts_as_cancelled(tmp_path: Path) -> None:
    script = """trap 'echo "#9 ERROR: context canceled"; exit 130' INT
echo "#5 [2/4] RUN sleep 600"
while true; do sleep 0.1; done
"""
    outcome, seconds = stopped(builder_running(script, tmp_path), tmp_path)
    assert seconds < 10 and outcome.cancelled and outcome.image_id is None, (seconds, outcome)


def test_a_cli_that_ignores_sigint_is_killed_after_the_grace(tmp_path: Path) -> None:
    """A CLI started by a script in the background inherits SIGINT ignored: the stop must not wait for it forever."""
    script = """trap '' INT
echo "#5 [2/4] RUN sleep 600"
while true; do sleep 0.1; done
"""
    outcome, seconds = stopped(builder_running(script, tmp_path, stop_grace=1.0), tmp_path)
    assert 1.0 <= seconds < 8 and outcome.cancelled and outcome.image_id is None, (seconds, outcome)


def test_the_failure_hint_reads_buildkit_errors_and_a_full_disk() -> None:
    from torchimages.engine import failure_hint

    state, _ = read(FAILURE)
    assert failure_hint(state.outcome, None).startswith("fix the failing command")
    full = BuildOutcome("img", "t", error="write /var/lib/docker/overlay2/x/diff/a.whl: no space left on device",
                        step="[internal] load build context")
    assert "disk is full" in failure_hint(full, None) and "docker builder prune" in failure_hint(full, None)


# BuildKit 0.10 and newer (Docker 23+, buildx on GitHub's runners) word a failed command this way; this engine's
# BuildKit is 0.8, so this stream is written after buildx's documented output, not recorded here.
MODERN_FAILURE = """\
#6 [builder 3/4] RUN echo about to fail; ls /nonexistent
#6 0.312 about to fail
#6 0.315 ls: cannot access '/nonexistent': No such file or directory
#6 ERROR: process "/bin/sh -c echo about to fail; ls /nonexistent" did not complete successfully: exit code: 2
------
 > [builder 3/4] RUN echo about to fail; ls /nonexistent:
0.315 ls: cannot access '/nonexistent': No such file or directory
------
ERROR: failed to solve: process "/bin/sh -c echo about to fail; ls /nonexistent" did not complete successfully: exit code: 2
"""


@pytest.mark.parametrize("stream", [FAILURE, MODERN_FAILURE], ids=["buildkit-0.8", "buildkit-0.10+"])
def test_every_buildkit_names_the_failed_command_by_its_exit_code(stream: str) -> None:
    from torchimages.engine import failure_hint, short_error

    state, _ = read(stream)
    assert state.outcome.step.endswith("RUN echo about to fail; ls /nonexistent"), state.outcome.step
    assert short_error(state.outcome.error) == "the step's command exited with code 2", state.outcome.error
    assert failure_hint(state.outcome, None).startswith("fix the failing command")
    assert "ls: cannot access '/nonexistent'" in state.tail[-1]


def test_the_classic_builder_error_is_shortened_alike_and_other_errors_are_kept() -> None:
    from torchimages.engine import short_error

    classic = "The command '/bin/bash -o pipefail -c set -eux;\n apt-get install -y x' returned a non-zero code: 100"
    assert short_error(classic) == "the step's command exited with code 100"
    kept = "failed to compute cache key: \"/x\" not found: not found"
    assert short_error(kept) == kept


def test_a_long_step_is_cut_in_the_message() -> None:
    from torchimages.build.stage import STEP_SHOWN, shortened

    assert shortened("Step 2/9 : RUN true") == "Step 2/9 : RUN true"
    cut = shortened("Step 6/39 : RUN " + "x" * 500)
    assert cut.endswith(" ...") and len(cut) == STEP_SHOWN + 4


@pytest.mark.parametrize("written", ["sha256:abc", "garbage", "sha256:" + "e3" * 32 + "\\nmore"])
def test_an_image_id_file_that_holds_no_digest_fails_the_build(tmp_path: Path, written: str) -> None:
    """The --iidfile is the CLI's answer, read back as input: what is not one digest is never tagged or pushed."""
    script = f"""while [ $# -gt 0 ]; do [ "$1" = --iidfile ] && printf '{written}' > "$2"; shift; done
cat <<'STREAM'
{SUCCESS}STREAM
"""
    outcome = builder_running(script, tmp_path).build("img", tmp_path, "t", buildargs={}, emit=lambda _e: None,
                                                     cancel=threading.Event())
    assert not outcome.ok and outcome.image_id is None and "as the image ID, not a digest" in (outcome.error or "")
