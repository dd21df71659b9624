"""enmesh's Keycloak provider (keycloak_scram/: the SCRAM keys enmesh-auth asks for), and
the one recipe that builds it: compiled against the very Keycloak it goes into, so it
follows that release's SPI. Hosts run the recipe on the deployer's cached distribution
(enmesh.deploy.keycloak_dist); on Kubernetes an init container of Keycloak's pod runs it
in a JDK image against the jars of Keycloak's own image (pulumi/enmesh_k8s/keycloak.py).
"""

from __future__ import annotations

import shlex
from pathlib import Path

PROVIDER_SOURCES = Path(__file__).with_name("keycloak_scram")
PROVIDER_JAR = "enmesh-scram.jar"
MIN_JAVA = 21  # Keycloak 26 needs Java 21 or newer


def source_files() -> list[str]:
    """The provider's files, as paths relative to PROVIDER_SOURCES (sorted)."""
    return sorted(
        p.relative_to(PROVIDER_SOURCES).as_posix()
        for p in PROVIDER_SOURCES.rglob("*")
        if p.is_file()
    )


def build_script(sources: str, libs: str, providers: str, work: str) -> str:
    """A POSIX shell script: the sources under `sources` compiled against the jars in
    `libs` (a Keycloak's lib/lib/main) into `providers`/enmesh-scram.jar, through `work`;
    `javac` and `jar` come from PATH. Links are followed (`find -L`, `cp -L`): a
    Kubernetes ConfigMap volume presents its files through symbolic links."""
    src, lib, out, tmp = (shlex.quote(p) for p in (sources, libs, providers, work))
    return "\n".join(
        [
            "set -eu",
            f"rm -rf {tmp}/classes && mkdir -p {tmp}/classes",
            f'find -L {src} -name "*.java" | sort > {tmp}/sources',
            f'javac --release {MIN_JAVA} -cp {lib}"/*" -d {tmp}/classes @{tmp}/sources',
            f"cp -RL {src}/META-INF {tmp}/classes/",
            f"jar --create --file {out}/{PROVIDER_JAR} -C {tmp}/classes .",
            f"rm -rf {tmp}/classes {tmp}/sources",
            "",
        ]
    )
