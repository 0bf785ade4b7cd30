"""Turn matrix entries into image specs, refusing every combination that cannot work.

Each refusal says what would be valid, so a wrong combination dies here in a second rather
than after a 10 GB build.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import Problem, UserError
from . import compat, grammar
from .compat import CompatData, TorchRelease, matches
from .grammar import DEFAULT_PLATFORM, PLATFORMS, REGISTRY, architecture, entry_name_problem, release_problem
from .matrix import DEFAULT_PLATFORMS, Entry, Matrix, beyond_default

TORCH_INDEX = "https://download.pytorch.org/whl/{variant}"
DOMAIN_LIBS = ("torchvision", "torchaudio")


@dataclass(frozen=True)
class PlatformImage:
    """One image as built: a variant of an entry for one platform. `image` names it in jobs, tags, reports and
    manifests; `name` is the image across its platforms, whose release tag is an image index when there are several
    (ImageSpec.indexed)."""

    variant: str
    platform: str
    image: str  # NAME[-VARIANT], or NAME[-VARIANT]-ARCH for an indexed entry
    name: str  # NAME[-VARIANT]


@dataclass(frozen=True)
class ImageSpec:
    """Everything needed to render, build, tag and label one image and its variants."""

    name: str
    flavor: str
    variants: tuple[str, ...]
    torch: str
    python: str
    base_image: str
    origin: str
    line: int | None
    cuda: str | None = None
    cuda_image: str | None = None
    cudnn: str | None = None
    nccl: str | None = None
    ngc: str | None = None
    torch_variant: str | None = None
    torch_index: str | None = None
    domain_pins: tuple[str, ...] = ()
    apt: tuple[str, ...] = ()
    pip: tuple[str, ...] = ()
    min_driver: str | None = None
    min_driver_compat: str | None = None
    archs: tuple[str, ...] = ()  # the GPU generations claimed for the default platform's wheel
    platform_archs: tuple[tuple[str, tuple[str, ...]], ...] = ()  # for each other platform: its wheel's
    platform_ptx: tuple[tuple[str, str], ...] = ()  # platform -> the generation whose PTX its wheel carries
    size_growth_reason: str | None = None  # why its images may grow past --max-growth (the size budget)
    platforms: tuple[str, ...] = DEFAULT_PLATFORMS  # linux/amd64, linux/arm64: each proven to have its wheels
    # The devel variant's compiler, from PyPI: the requirement and where it lands under site-packages (CUDA_HOME);
    # None for an ngc entry, whose base carries nvcc.
    devel_pip: str | None = None
    devel_home: str | None = None
    devel_wheels: tuple[str, ...] = ()  # the CUDA wheels it installs that the base has not (projects)
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def image_names(self) -> tuple[str, ...]:
        """The base image first, then each variant, as `name` or `name-variant`."""
        return tuple(self.image_name(variant) for variant in ("base", *self.variants))

    def image_name(self, variant: str) -> str:
        return self.name if variant == "base" else f"{self.name}-{variant}"

    def images(self) -> tuple[tuple[str, str], ...]:
        """(variant, image name) for the base image and each variant, base first."""
        return tuple((variant, self.image_name(variant)) for variant in ("base", *self.variants))

    def archs_for(self, platform: str) -> tuple[str, ...]:
        """The GPU generations claimed for the image of `platform`: what its suite checks the kernels against."""
        return self.archs if platform == DEFAULT_PLATFORM else dict(self.platform_archs).get(platform, ())

    def gpu_archs(self, platform: str) -> str:
        """What the image of `platform` runs on, in TORCH_CUDA_ARCH_LIST's words: the generations claimed for its wheel,
        '+PTX' on the one whose PTX it carries ('7.5 8.0 8.6 9.0 10.0 12.0+PTX'); '' for a CPU image or unrecorded."""
        ptx = dict(self.platform_ptx).get(platform)
        return " ".join(f"{arch}+PTX" if arch == ptx else arch for arch in self.archs_for(platform))

    def runs_on(self, platform: str) -> dict[str, str]:
        """What a host needs to run the image of `platform`, as the report, the release manifest and its index record it:
        the driver its CUDA needs (and the oldest of minor-version compatibility), and its GPU generations; 'none' for
        what does not apply."""
        return {"min_driver": self.min_driver or "none", "min_driver_minor_compat": self.min_driver_compat or "none",
                "gpu_archs": self.gpu_archs(platform) or "none"}

    def host_facts(self) -> dict[str, object]:
        """What decides whether the image runs on a host (image.json in the image; `build.py fit` before the pull):
        its versions, the driver its CUDA needs, its platforms and the GPU generations of each."""
        return {"name": self.name, "flavor": self.flavor, **self.versions(),
                "min_driver": self.min_driver, "min_driver_minor_compat": self.min_driver_compat,
                "platforms": list(self.platforms),
                "gpu_archs": {platform: self.gpu_archs(platform) for platform in self.platforms if self.gpu_archs(platform)}}

    @property
    def devel_cuda_home(self) -> str | None:
        """CUDA_HOME of the devel image: where its compiler lands in the image's environment (/opt/venv, as the base
        image makes it)."""
        return f"/opt/venv/lib/python{self.python}/site-packages/{self.devel_home}" if self.devel_home else None

    def cuda_arch_list(self, platform: str) -> str:
        """TORCH_CUDA_ARCH_LIST of a devel image: the generations claimed for the platform's wheel, with PTX of the
        newest, so an extension is built for the GPUs torch itself runs on and, through PTX, for newer ones."""
        archs = list(self.archs_for(platform))
        return ";".join([*archs[:-1], f"{archs[-1]}+PTX"]) if archs else ""

    @property
    def indexed(self) -> bool:
        """Whether its release tags are image indexes over platforms: every entry but one built for the default
        platform alone, whose images and tags stay as they always were."""
        return self.platforms != DEFAULT_PLATFORMS

    def platform_image(self, variant: str, platform: str) -> PlatformImage:
        name = self.image_name(variant)
        return PlatformImage(variant, platform, f"{name}-{architecture(platform)}" if self.indexed else name, name)

    def platform_images(self) -> tuple[PlatformImage, ...]:
        """Every image built of this entry: platform by platform, the base first, then each variant."""
        return tuple(self.platform_image(variant, platform) for platform in self.platforms
                     for variant in ("base", *self.variants))

    def versions(self) -> dict[str, str | None]:
        """The declared versions: what the report, image.json, the matrix listing and the smoke suite read."""
        return {"torch": self.torch, "cuda": self.cuda, "cudnn": self.cudnn, "nccl": self.nccl, "python": self.python,
                "ngc": self.ngc}


@dataclass(frozen=True)
class Plan:
    file: str
    registry: str
    specs: tuple[ImageSpec, ...]
    pins: dict[str, str] = field(default_factory=dict)  # base tag -> digest, from the lock file beside the matrix

    def base_reference(self, spec: ImageSpec) -> str:
        """What a base image's FROM names: tag@digest when the lock pins the tag, else the matrix's reference."""
        digest = self.pins.get(spec.base_image)
        return f"{spec.base_image}@{digest}" if digest else spec.base_image

    def tag(self, release: str, image_name: str) -> str:
        return f"{self.registry}:{image_tag(release, image_name)}"

    def indexed_images(self) -> dict[str, list[tuple[str, str]]]:
        """The images built for several platforms (or one besides the default): name -> [(platform, image)], in the
        entry's platform order. Each one's release tag is an image index over them."""
        return {spec.image_name(variant): [(platform, spec.platform_image(variant, platform).image)
                                           for platform in spec.platforms]
                for spec in self.specs if spec.indexed for variant in ("base", *spec.variants)}


def image_tag(release: str, image_name: str) -> str:
    """The tag of an image in a release (RELEASE-NAME[-VARIANT]): built from the two, never parsed back."""
    return f"{release}-{image_name}"


@dataclass(frozen=True)
class Release:
    """A release as pushed: its tag (v2.7) and, for candidates, the candidate (rc.42). The one spelling of what its
    images are pushed under: RELEASE-IMAGE, or RELEASE-CANDIDATE-IMAGE, which `promote` makes release tags."""

    tag: str
    candidate: str | None = None

    @property
    def name(self) -> str:
        return f"{self.tag}-{self.candidate}" if self.candidate else self.tag

    def image_tag(self, image_name: str) -> str:
        return image_tag(self.name, image_name)

    def problem(self) -> str | None:
        """Why the two do not make a tag, or None."""
        return "an empty candidate" if self.candidate == "" else release_problem(self.name)


def resolve(matrix: Matrix, data: CompatData | None = None) -> Plan:
    """Check every entry against the compatibility data; raise one UserError listing all problems."""
    data = data or compat.load()
    problems: list[Problem] = []
    if not REGISTRY.fullmatch(matrix.registry):  # fullmatch: `$` would let a trailing newline in
        problems.append(Problem(matrix.file, matrix.located.line(("registry",)), None, "registry",
                                f"{matrix.registry!r} is not a registry/repository reference; "
                                "use lowercase HOST[:PORT]/PATH, e.g. registry.example.com/ml/pytorch"))
    specs = []
    for entry in matrix.entries:
        resolver = _EntryResolver(matrix, entry, data)
        spec = resolver.resolve()
        problems += resolver.problems
        if spec is not None:
            specs.append(spec)
    problems += _duplicates(matrix, specs)
    if problems:
        raise UserError(problems)
    return Plan(file=matrix.file, registry=matrix.registry, specs=tuple(specs))


def _duplicates(matrix: Matrix, specs: list[ImageSpec]) -> list[Problem]:
    seen: dict[str, ImageSpec] = {}
    problems = []
    for spec in specs:
        names = {*spec.image_names(), *(built.image for built in spec.platform_images())}
        for image in sorted(names):
            first = seen.setdefault(image, spec)
            if first is not spec:
                problems.append(Problem(matrix.file, spec.line, spec.origin, "name",
                                        f"duplicate image name '{image}' (also {first.origin}, line {first.line}); "
                                        "give one of them a distinct 'name'"))
    return problems


class _EntryResolver:
    """Resolves one entry; collects problems instead of stopping at the first."""

    def __init__(self, matrix: Matrix, entry: Entry, data: CompatData) -> None:
        self.matrix, self.entry, self.data = matrix, entry, data
        self.problems: list[Problem] = []
        self.warnings: list[str] = []

    def fail(self, field_name: str | None, message: str) -> None:
        line = self.entry.field_line(self.matrix.located, field_name) if field_name else self.entry.line
        self.problems.append(Problem(self.matrix.file, line, self.entry.origin, field_name, message))

    def require(self, *names: str) -> bool:
        missing = [n for n in names if not self.entry.get(n)]
        for name in missing:
            self.fail(name, f"required for a {self.entry.get('flavor')} image")
        return not missing

    def forbid(self, reason: str, *names: str) -> None:
        for name in names:
            if self.entry.get(name) is not None:
                self.fail(name, f"not allowed here: {reason}; remove it")

    def resolve(self) -> ImageSpec | None:
        flavor = self.entry.get("flavor")
        spec = {"cuda": self._cuda, "cpu": self._cpu, "ngc": self._ngc}[flavor]()
        if spec is None or self.problems:
            return None
        name = self.entry.get("name") or spec.pop("derived_name")
        spec.pop("derived_name", None)
        if why := entry_name_problem(name):
            self.fail("name", why)
            return None
        return ImageSpec(
            name=name, flavor=flavor, origin=self.entry.origin, line=self.entry.line,
            variants=tuple(self.entry.get("variants") or ()), platforms=self.platforms(),
            apt=tuple(self.entry.get("apt") or ()), size_growth_reason=self.entry.get("size_growth_reason"),
            warnings=tuple(self.warnings), **spec,
        )

    # --- flavors -------------------------------------------------------------------------

    def _cuda(self) -> dict | None:
        self.forbid("a cuda image gets its versions from torch wheels, not an NGC release", "ngc")
        if not self.require("torch", "cuda", "python"):
            return None
        release = self._torch_release()
        if release is None:
            return None
        cuda = self.entry.get("cuda")
        build = release.build_for(".".join(cuda.split(".")[:2]))
        if build is None:
            builds = ", ".join(b.cuda for b in release.builds)
            self.fail("cuda", f"torch {release.version} has no CUDA {cuda} build; its builds: {builds}")
            return None
        self._wheels(release, build)
        self._cudnn(release, build)
        self._note_unconfirmed(f"torch {release.version} {build.variant}", build.unconfirmed)
        cuda_image, base_image = self._cuda_base(cuda, build.cuda)
        if cuda_image is None and base_image is None:
            return None
        devel = self._devel_compiler(release, build, cuda_image)
        python = self.entry.get("python")
        short_cudnn = _short(build.cudnn) if build.cudnn else "unknown"
        return {
            "derived_name": f"torch{release.version}-{build.variant}-cudnn{short_cudnn}-py{python}",
            "torch": release.version, "python": python, "cuda": build.cuda, "cuda_image": cuda_image,
            "cudnn": build.cudnn, "nccl": build.nccl, "torch_variant": build.variant,
            "torch_index": TORCH_INDEX.format(variant=build.variant),
            "base_image": base_image,
            "min_driver": self.data.min_driver(cuda_image or build.cuda),
            "min_driver_compat": self.data.family_min_driver(build.cuda),
            "archs": build.archs, "platform_archs": self._platform_archs(release, build),
            "platform_ptx": tuple((platform, ptx) for platform in self.platforms()
                                  if (ptx := build.ptx_on(PLATFORMS[platform]))),
            **self._pip(release),
            **devel,
        }

    def _cpu(self) -> dict | None:
        self.forbid("a cpu image carries no CUDA, cuDNN or NGC base", "cuda", "cudnn", "ngc")
        if not self.require("torch", "python"):
            return None
        release = self._torch_release()
        if release is None or not self._python(release):
            return None
        self._no_platform_facts("torch's CPU builds")
        if "devel" in (self.entry.get("variants") or ()):
            self.fail("variants", "devel: a cpu image has no CUDA to compile extensions for; remove devel, or give it to "
                                  "a cuda entry (CUDA 13.0: nvcc from PyPI) or an ngc entry (its base carries nvcc)")
        python = self.entry.get("python")
        os_release = self.data.os_for_python(python) or self.data.os_for_python("3.11")
        if os_release.unconfirmed:
            self.warnings.append(f"the python3 of {os_release.image} is UNCONFIRMED in the compat data")
        return {
            "derived_name": f"torch{release.version}-cpu-py{python}",
            "torch": release.version, "python": python, "torch_variant": "cpu",
            "torch_index": TORCH_INDEX.format(variant="cpu"),
            "base_image": self.entry.get("base_image") or os_release.image,
            **self._pip(release),
        }

    def _ngc(self) -> dict | None:
        if not self.require("ngc"):
            return None
        wanted = self.entry.get("ngc")
        release = self.data.ngc_release(wanted)
        usable = ", ".join(r.release for r in self.data.ngc if r.complete)
        if release is None:
            self.fail("ngc", f"unknown NGC PyTorch release '{wanted}'; releases with known contents: {usable}")
            return None
        if not release.complete:
            missing = [f for f in ("pytorch", "cuda", "cudnn", "nccl", "python") if not getattr(release, f)]
            self.fail("ngc", f"NGC {wanted} is known but its {', '.join(missing)} are not recorded in the compat data, "
                             f"so its image cannot be labelled or checked; releases with known contents: {usable}")
            return None
        for field_name, shipped in (("torch", release.pytorch), ("cuda", release.cuda),
                                    ("cudnn", release.cudnn), ("python", release.python)):
            pinned = self.entry.get(field_name)
            if pinned is not None and not matches(pinned, shipped):
                self.fail(field_name, f"an ngc image takes its versions from the NGC release: NGC {wanted} ships "
                                      f"{field_name} {shipped}; set '{_short(shipped)}' or remove the field")
        if self.entry.get("pip") and any(grammar.requirement_name(p) in ("torch", *DOMAIN_LIBS) for p in self.entry.get("pip")):
            self.fail("pip", f"NGC {wanted} ships its own torch build; replacing torch or its domain libraries breaks it")
        self._note_unconfirmed(f"NGC {wanted}", release.unconfirmed)
        self._no_platform_facts("NGC releases")
        if release.extra_file:
            self.warnings.append(f"NGC {wanted}: facts from {release.extra_file} ({compat.EXTRA_ENV}), not the reviewed "
                                 "compat data")
        return {
            "derived_name": f"ngc{wanted}-torch{_short(release.pytorch)}-cu{release.cuda.replace('.', '')[:3]}"
                            f"-cudnn{_short(release.cudnn)}-py{_short(release.python)}",
            "torch": release.pytorch, "python": _short(release.python), "ngc": wanted,
            "cuda": ".".join(release.cuda.split(".")[:2]), "cuda_image": ".".join(release.cuda.split(".")[:3]),
            "cudnn": release.cudnn, "nccl": release.nccl,
            "base_image": self.entry.get("base_image") or release.image,
            "min_driver": self.data.min_driver(".".join(release.cuda.split(".")[:3])),
            "min_driver_compat": self.data.family_min_driver(release.cuda),
            "pip": tuple(self.entry.get("pip") or ()),
        }

    # --- checks shared by flavors ----------------------------------------------------------

    def _torch_release(self) -> TorchRelease | None:
        wanted = self.entry.get("torch")
        release = self.data.torch_release(wanted)
        if release is None:
            known = ", ".join(self.data.torch_versions())
            self.fail("torch", f"no torch release '{wanted}' is known; known releases: {known}")
        return release

    def _python(self, release: TorchRelease) -> bool:
        python = self.entry.get("python")
        if python in release.python:
            return True
        self.fail("python", f"torch {release.version} has no wheel for Python {python}; "
                            f"it has wheels for: {', '.join(release.python)}")
        return False

    def platforms(self) -> tuple[str, ...]:
        return tuple(self.entry.get("platforms") or DEFAULT_PLATFORMS)

    def _no_platform_facts(self, what: str) -> None:
        """Platforms beyond the default that the compat data cannot prove for `what`: refused, not assumed."""
        others = beyond_default(self.platforms())
        if others:
            self.fail("platforms", f"the compat data records no platforms for {what}, so {', '.join(others)} cannot be "
                                   f"proven; valid here: {DEFAULT_PLATFORM}")

    def _wheels(self, release: TorchRelease, build: compat.TorchBuild) -> None:
        """A wheel exists for every axis of the entry: torch x CUDA build x Python x platform."""
        python = self.entry.get("python")
        for platform in self.platforms():
            machine = PLATFORMS[platform]
            if release.has_wheel(build, python, machine):
                continue
            if platform == DEFAULT_PLATFORM:
                self.fail("python", f"torch {release.version} {build.variant} has no wheel for Python {python} on "
                                    f"{machine}; nearest that exist: {self._nearest(release, build, python, machine)}")
                continue
            having = [p for p, m in PLATFORMS.items() if release.has_wheel(build, python, m)]
            unread = " (no index read lists this build's wheels per platform: python build.py compat refresh)" \
                if build.has_wheel(python, machine) is None else ""
            self.fail("platforms", f"torch {release.version} {build.variant} has no wheel for Python {python} on "
                                   f"{platform}{unread}; platforms with one: {', '.join(having) or 'none'}")

    def _platform_archs(self, release: TorchRelease, build: compat.TorchBuild) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """The GPU generations of each other platform's wheel; where the data records none, the suite can check none,
        and validate says so."""
        found = tuple((platform, build.archs_on(PLATFORMS[platform])) for platform in beyond_default(self.platforms()))
        for platform, archs in found:
            if not archs:
                self.warnings.append(f"the GPU generations of torch {release.version} {build.variant} on {platform} are "
                                     "not recorded in the compat data (archs_by_machine): its suite checks none")
        return found

    def _nearest(self, release: TorchRelease, build: compat.TorchBuild, python: str, platform: str) -> str:
        """Up to three installable combinations closest to the entry: other Pythons of the same build, the same Python
        in the nearest torch releases with the same CUDA build, and in the release's other builds."""
        same_build = [p for p in (build.python or release.python) if release.has_wheel(build, p, platform)
                      and p.endswith("t") == python.endswith("t")]  # a free-threaded Python only for one asked
        options = [f"Python {', '.join(same_build[-3:])} with torch {release.version} {build.variant}"] if same_build else []
        releases = sorted(self.data.torch, key=lambda r: abs(self.data.torch.index(r) - self.data.torch.index(release)))
        for other in releases:
            twin = next((b for b in other.builds if b.variant == build.variant), None)
            if other is not release and twin and other.has_wheel(twin, python, platform):
                options.append(f"torch {other.version} {build.variant} with Python {python}")
                break
        options += [f"torch {release.version} {b.variant} with Python {python}" for b in release.builds
                    if b is not build and release.has_wheel(b, python, platform)][:1]
        return "; ".join(options) or "none in the compat data"

    def _cudnn(self, release: TorchRelease, build: compat.TorchBuild) -> None:
        wanted = self.entry.get("cudnn")
        if wanted is None:
            return
        if build.cudnn is None:
            self.warnings.append(f"cuDNN of torch {release.version} {build.variant} is not recorded; '{wanted}' unchecked")
        elif not matches(wanted, build.cudnn):
            self.fail("cudnn", f"torch {release.version} ({build.variant}) bundles cuDNN {build.cudnn}, not {wanted}; "
                               f"set cudnn: \"{_short(build.cudnn)}\" or remove the field (it is derived)")

    def _devel_compiler(self, release: TorchRelease, build: compat.TorchBuild, cuda_image: str | None) -> dict:
        """The devel variant's nvcc, of exactly torch's CUDA: from PyPI where it has one for the line and for every
        platform of the entry; refused otherwise, naming the source that has it."""
        if "devel" not in (self.entry.get("variants") or ()):
            return {}
        compiler = self.data.cuda_compiler(build.cuda)
        what = f"devel: torch {release.version} {build.variant} needs nvcc {build.cuda}"
        if compiler is None:
            self.fail("variants", f"{what}, and the compat data records no source of it (cuda_compiler)")
        elif compiler.pypi is None:
            patch = cuda_image or build.cuda
            ubuntus = self.data.ubuntu_by_cuda.get(patch) or ("22.04",)
            image = (compiler.devel_image or "").format(patch=patch, ubuntu=ubuntus[-1])
            self.fail("variants", f"{what}, which PyPI does not have ({compiler.why}): {image} has it, and this build "
                                  "installs nvcc from PyPI only; for a devel image use a CUDA 13.0 build (torch 2.14.0 "
                                  "cu130) or an ngc entry (its base carries nvcc)")
        else:
            missing = [p for p in self.platforms() if PLATFORMS[p] not in compiler.machines]
            if missing:
                self.fail("platforms", f"{what}: {compiler.pypi} is recorded for {', '.join(compiler.machines)} only, "
                                       f"not {', '.join(missing)}")
            return {"devel_pip": compiler.pypi, "devel_home": compiler.home, "devel_wheels": compiler.wheels}
        return {}

    def _cuda_base(self, cuda: str, build_cuda: str) -> tuple[str | None, str | None]:
        """The nvidia/cuda -base image: only cudart, so torch's own CUDA libraries are the only copy.

        Of the Ubuntu releases published for the CUDA patch, the one whose python3 is the entry's
        Python is preferred (the build then needs no standalone Python), else the newest.
        """
        patches = self.data.cuda_patches(cuda)
        python = self.entry.get("python")
        override = self.entry.get("base_image")
        if not patches:
            if override:
                self.warnings.append(f"no nvidia/cuda image is recorded for CUDA {cuda}; using base_image as given")
                return None, override
            known = ", ".join(v for v in self.data.ubuntu_by_cuda if matches(build_cuda.split(".", maxsplit=1)[0], v))
            self.fail("cuda", f"no nvidia/cuda image is recorded for CUDA {cuda}; known: {known}")
            return None, None
        patch = patches[-1]
        ubuntus = self.data.ubuntu_by_cuda[patch]
        os_match = [u for u in ubuntus if (o := self.data.os_for_python(python)) and o.key == f"ubuntu{u}"]
        ubuntu = os_match[0] if os_match else ubuntus[-1]
        return patch, override or f"nvidia/cuda:{patch}-base-ubuntu{ubuntu}"

    def _pip(self, release: TorchRelease) -> dict:
        """Pin torchvision/torchaudio named in `pip` to the release that pairs with torch."""
        pins, extras = [], []
        for requirement in self.entry.get("pip") or ():
            name = grammar.requirement_name(requirement)
            if name == "torch":
                self.fail("pip", "torch is set by the 'torch' field; remove it from 'pip'")
            elif name in DOMAIN_LIBS:
                paired = getattr(release, name)
                if paired is None:
                    self.fail("pip", f"no {name} release pairs with torch {release.version}; remove it from 'pip'")
                elif requirement.strip() not in (name, f"{name}=={paired}"):
                    self.fail("pip", f"{name} for torch {release.version} is {paired}; write plain '{name}' (pinned for you)")
                else:
                    pins.append(f"{name}=={paired}")
            else:
                extras.append(requirement)
        return {"domain_pins": tuple(pins), "pip": tuple(extras)}

    def _note_unconfirmed(self, what: str, fields: tuple[str, ...]) -> None:
        if fields:
            self.warnings.append(f"{what}: {', '.join(fields)} UNCONFIRMED in the compat data")


def _short(version: str) -> str:
    """'8.9.2.26' -> '8.9'; '2.11.0a0+abc' -> '2.11'."""
    return ".".join(version.split("+", maxsplit=1)[0].split(".")[:2])
