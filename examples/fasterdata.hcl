# Two data-transfer nodes tuned from ESnet fasterdata's built-in profiles
# (see "Tuning profiles" in the README for the pages and their dates).
# base = "..." brings in a profile's values; anything the block sets
# itself overrides the profile for that key. `sosappliance plan` shows
# where each value came from.

controller {
  node = "dtn-east"
}

security {
  psk_file = "/etc/sosappliance/psk"
}

site "east" {
  prefixes = ["198.51.100.0/25"]
  switch "sw-east" {
    datapath_id = "00:00:00:00:00:00:00:0a"
  }
  agent "dtn-east" {
    node        = "dtn-east"
    switch      = "sw-east"
    switch_port = 1
    mac         = "02:00:00:00:0a:01"
    address     = "198.51.100.2"
    interface   = "ens1f0"
    tuning      = ["dtn-100g"]
  }
}

site "west" {
  prefixes = ["198.51.100.128/25"]
  switch "sw-west" {
    datapath_id = "00:00:00:00:00:00:00:0b"
  }
  agent "dtn-west" {
    node        = "dtn-west"
    switch      = "sw-west"
    switch_port = 1
    mac         = "02:00:00:00:0b:01"
    address     = "198.51.100.130"
    interface   = "eth1"
    tuning      = ["dtn-10g"]
  }
}

# GridFTP between the two DTN pools: the control port and the data port
# range the servers set with GLOBUS_TCP_PORT_RANGE. In mode E the data
# sender opens the data connections, so a download is opened by a west
# server toward an east client: direction = "both" carries those too, and
# the agents swap roles with whoever opened the connection.
whitelist "transfers" {
  clients      = ["198.51.100.0/25"]
  servers      = ["198.51.100.192/28"]
  server_ports = ["2811", "50000-51000"]
  direction    = "both"
}

tuning "dtn-100g" {
  base = "fasterdata-100g"
  # The profile sets no IRQ CPUs: fasterdata says to use the cores of the
  # NIC's NUMA node (cat /sys/class/net/ens1f0/device/numa_node), which
  # only this host knows.
  interface "ens1f0" {
    irq_cpus = "0-7"
  }
  congestion_control = "htcp"
}

tuning "dtn-10g" {
  base = "fasterdata-10g"
  # The profile's 10G buffers let one connection grow to 32 MiB, which
  # fills 10 Gbit/s up to about 27 ms; this path is 100 ms long (10 Gbit/s
  # x 100 ms = 125 MB), so the file raises them; and this path carries no
  # jumbo frames, so the file's MTU overrides the profile's 9000.
  sysctl = {
    "net.core.rmem_max" = "268435456"
    "net.core.wmem_max" = "268435456"
    "net.ipv4.tcp_rmem" = "4096 87380 134217728"
    "net.ipv4.tcp_wmem" = "4096 65536 134217728"
  }
  interface "eth1" {
    mtu = 1500
  }
}
