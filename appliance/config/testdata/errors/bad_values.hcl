controller {
  node   = "ctl"
  listen = "6653" # ERROR: controller listen
}
security {
  psk_file = "/etc/sosappliance/psk"
}
site "a" {
  prefixes = ["10.1.0.7/24"] # ERROR: has host bits set
  switch "sw-a" {
    datapath_id = "00:00:00:01" # ERROR: must have 8 colon-separated bytes
  }
  agent "ag-a" {
    node        = "n-a"
    switch      = "sw-a"
    switch_port = 0 # ERROR: switch_port must be between
    mac         = "02:00:00:00:01" # ERROR: is not a 48-bit MAC address
    address     = "10.1.0.256" # ERROR: is not an IP address
    interface   = "eth/0" # ERROR: is not a network interface name
  }
}
site "b" {
  prefixes = ["2001:db8::1/32"] # ERROR: has host bits set; did you mean 2001:db8::/32?
  switch "sw-b" {
    datapath_id = "zz" # ERROR: is not a datapath id
    forwarding  = "drop" # ERROR: forwarding must be "normal"
  }
}
tuning "t" {
  relay_cpus = "3-1" # ERROR: runs backwards
  sysctl = {
    "net..core" = "1" # ERROR: is not a sysctl name
  }
  interface "eth0" {
    mtu      = 20 # ERROR: mtu must be between 68 and 65535
    irq_cpus = "a-b" # ERROR: is not a CPU number
  }
}
