controller {
  node = "ctl"
}
security {
  psk_file = "/etc/sosappliance/psk"
}
site "a" {
  prefixes = ["10.1.0.0/24"]
  switch "sw-a" {
    datapath_id = "00:00:00:00:00:00:00:01"
    tls_name    = "sw-a" # ERROR: names its certificate (tls_name), but the controller has no tls block
  }
}
