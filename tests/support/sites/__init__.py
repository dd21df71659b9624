"""Real multi-host sites on one machine (systemd-nspawn hosts on a private bridge)."""

from tests.support.sites.site import Host, SiteError, SiteSpec, create, destroy, leftovers

__all__ = ["Host", "SiteError", "SiteSpec", "create", "destroy", "leftovers"]
