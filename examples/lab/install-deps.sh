#!/bin/sh
# Installs the Debian packages that the tests and the lab need, if missing.
set -eu
need=""
# systemd-container and debootstrap boot the packages under a real systemd;
# prometheus brings promtool, which checks the shipped alerting rules; tmux
# runs `status --watch` in a terminal of a known size; etcd-server and
# etcd-client are the etcd the controllers elect their master on (the
# tests start their own members in temp dirs).
for pkg in openvswitch-switch iperf3 ethtool nftables curl iproute2 rpm lintian systemd \
	systemd-container debootstrap prometheus tmux etcd-server etcd-client; do
	dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need="$need $pkg"
done
if [ -n "$need" ]; then
	echo "installing:$need"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	# shellcheck disable=SC2086
	apt-get install -y -qq --no-install-recommends $need >/dev/null
fi
