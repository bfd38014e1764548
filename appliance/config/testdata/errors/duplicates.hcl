controller {
  node = "ctl"
}
security {
  psk_file = "/etc/sosappliance/psk"
}
security { # ERROR: Duplicate security block
  psk_file = "/etc/sosappliance/psk2"
}
site "a" {
  prefixes = ["10.1.0.0/24"]
  switch "sw" {
    datapath_id = "00:00:00:00:00:00:00:01"
  }
}
site "a" { # ERROR: Duplicate site name "a"
  prefixes = ["10.2.0.0/24"]
  switch "sw" { # ERROR: Duplicate switch name "sw" # ERROR: repeats datapath id
    datapath_id = "00:00:00:00:00:00:00:01"
  }
}
tuning "t" {
  sysctl = {
    "net.core.rmem_max" = "1"
    "net.core.rmem_max" = "2" # ERROR: Duplicate sysctl
  }
}
