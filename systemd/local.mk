# systemd
