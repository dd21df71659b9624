"""Deploy-time helpers the Ansible roles and `enmesh up|down|status` call on a host."""
