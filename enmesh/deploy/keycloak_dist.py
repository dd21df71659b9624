"""Keycloak's server distribution from Maven Central, cached and checked.

`org.keycloak:keycloak-quarkus-dist` is the archive Keycloak releases (bin/kc.sh, lib/).
It is fetched once into a cache directory and verified against the SHA-1 Maven Central
publishes beside it; a CI machine's setup step can run `python -m
enmesh.deploy.keycloak_dist` to fill the cache before tests run. `kc.sh build` then
fixes the build-time options (database vendor, health endpoints) and enmesh's own
provider (enmesh/deploy/keycloak_scram: the SCRAM keys enmesh-auth asks for, compiled here
against the distribution's jars) into the unpacked copy. The copy's name carries a digest
of the provider's sources and the options, so a changed provider is a new copy.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from enmesh.deploy.keycloak_provider import MIN_JAVA, PROVIDER_SOURCES, build_script, source_files

VERSION = "26.5.6"
CACHE = Path(os.environ.get("ENMESH_KEYCLOAK_CACHE", "/var/cache/enmesh/keycloak"))
MAVEN = "https://repo1.maven.org/maven2/org/keycloak/keycloak-quarkus-dist"
BUILD_OPTIONS = ("--db=postgres", "--health-enabled=true")
# The SHA-1 Maven Central publishes beside each release enmesh runs, recorded here so a
# cached archive (or one the deployer copied to an air-gapped host) is checked with no
# network; another version's is asked of Maven Central.
KNOWN_SHA1 = {"26.5.6": "d899ed0a9e2da32a15924f87121f9e93cef6d981"}


def archive_url(version: str = VERSION) -> str:
    return f"{MAVEN}/{version}/keycloak-quarkus-dist-{version}.tar.gz"


@contextmanager
def _locked(cache: Path) -> Iterator[None]:
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one fetch/build at a time per cache
        yield


def fetch(version: str = VERSION, cache: Path = CACHE) -> Path:
    """The verified archive, downloaded only if the cache lacks it."""
    with _locked(cache):
        return _fetch(version, cache)


def _expected_sha1(version: str) -> str:
    if version in KNOWN_SHA1:
        return KNOWN_SHA1[version]
    with urllib.request.urlopen(archive_url(version) + ".sha1", timeout=60) as answer:
        published: bytes = answer.read()
    return published.decode().split()[0].strip().lower()


def _fetch(version: str, cache: Path) -> Path:
    archive = cache / f"keycloak-quarkus-dist-{version}.tar.gz"
    expected = _expected_sha1(version)
    if archive.exists() and _sha1(archive) == expected:
        return archive
    partial = archive.with_suffix(".part")
    with (
        urllib.request.urlopen(archive_url(version), timeout=600) as answer,
        partial.open("wb") as out,
    ):
        shutil.copyfileobj(answer, out, 1 << 20)
    actual = _sha1(partial)
    if actual != expected:
        partial.unlink()
        raise RuntimeError(
            f"{archive_url(version)}: SHA-1 {actual}, Maven Central says {expected}; not used"
        )
    partial.rename(archive)
    return archive


def _sha1(path: Path) -> str:
    digest = hashlib.sha1()  # what Maven Central publishes; integrity, not a signature
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def java_home() -> Path:
    """The newest JDK under /usr/lib/jvm that Keycloak accepts."""
    best: tuple[int, Path] | None = None
    for home in Path("/usr/lib/jvm").glob("*"):
        match = re.search(r"(\d+)", home.name.replace("1.", "", 1))
        major = int(match.group(1)) if match else 0
        if (home / "bin" / "java").exists() and major >= MIN_JAVA and major > (best or (0,))[0]:
            best = (major, home)
    if best is None:
        raise RuntimeError(f"Keycloak needs Java {MIN_JAVA}+; none found under /usr/lib/jvm")
    return best[1]


def build_digest() -> str:
    """What a built copy depends on besides the release: the options and the provider."""
    digest = hashlib.sha256(" ".join(BUILD_OPTIONS).encode())
    digest.update(build_script("SRC", "LIB", "OUT", "TMP").encode())
    for name in source_files():
        digest.update(name.encode() + b"\0")
        digest.update((PROVIDER_SOURCES / name).read_bytes())
    return digest.hexdigest()[:12]


def installed(version: str = VERSION, cache: Path = CACHE) -> Path:
    """An unpacked distribution with BUILD_OPTIONS and the provider built in (`kc.sh start
    --optimized`). Copies built from older sources are removed."""
    with _locked(cache):
        home = cache / f"keycloak-{version}-{build_digest()}-built"
        if (home / ".built").exists():
            return home
        archive = _fetch(version, cache)
        for stale in cache.glob("keycloak-*-built"):
            shutil.rmtree(stale, ignore_errors=True)
        staging = cache / f"unpack-{version}"
        shutil.rmtree(staging, ignore_errors=True)
        _extract(archive, staging)
        (staging / f"keycloak-{version}").rename(home)
        staging.rmdir()
        _build_provider(home)
        env = {**os.environ, "JAVA_HOME": str(java_home())}
        subprocess.run(
            [str(home / "bin" / "kc.sh"), "build", *BUILD_OPTIONS],
            env=env,
            check=True,
            capture_output=True,
        )
        (home / ".built").write_text(" ".join(BUILD_OPTIONS) + "\n")
        return home


def _extract(archive: Path, staging: Path) -> None:
    """Unpack, refusing members that would land outside `staging`. Python's extraction
    filters arrived in 3.11.4; Debian 12's Python is 3.11.2, so the check is also ours."""
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            names = [member.name] + ([member.linkname] if member.issym() or member.islnk() else [])
            for name in names:
                if Path(name).is_absolute() or ".." in Path(name).parts:
                    raise RuntimeError(f"{archive}: member {member.name!r} points outside it")
        tar.extractall(staging)  # members checked above


def _build_provider(home: Path) -> None:
    """Compile the provider against this distribution's own jars into providers/
    (enmesh.deploy.keycloak_provider's recipe, with the JDK Keycloak runs on)."""
    bin_dir = java_home() / "bin"
    if not (bin_dir / "javac").exists():
        raise RuntimeError(f"{java_home()} has no javac: Keycloak's provider needs a JDK")
    with tempfile.TemporaryDirectory(prefix="enmesh-keycloak-provider-") as tmp:
        script = build_script(
            str(PROVIDER_SOURCES), str(home / "lib" / "lib" / "main"), str(home / "providers"), tmp
        )
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        built = subprocess.run(
            ["sh", "-c", script], env=env, check=False, capture_output=True, text=True
        )
        if built.returncode != 0:
            raise RuntimeError(f"building {PROVIDER_SOURCES}: {built.stderr.strip()}")


def main() -> None:
    parser = argparse.ArgumentParser(description="Fetch and build Keycloak into the cache.")
    parser.add_argument("--version", default=VERSION)
    parser.add_argument("--cache", type=Path, default=CACHE)
    parser.add_argument(
        "--describe",
        action="store_true",
        help='print {"home": ..., "java": ...} as JSON (the built server and the JDK to run it)',
    )
    parser.add_argument(
        "--fetch-only",
        action="store_true",
        help="only fetch (or find) and check the release archive; print its path",
    )
    args = parser.parse_args()
    if args.fetch_only:
        print(fetch(args.version, args.cache))
        return
    home = installed(args.version, args.cache)
    if args.describe:
        print(json.dumps({"home": str(home), "java": str(java_home())}))
    else:
        print(home)


if __name__ == "__main__":
    main()
