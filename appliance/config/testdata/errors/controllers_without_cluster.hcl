controller {
  node = "ctl-a"
}
controller { # ERROR: Several controller blocks need a cluster block
  node   = "ctl-b"
  listen = "127.0.0.1:6654"
}
security {
  psk_file = "/etc/sosappliance/psk"
}
site "a" {
  prefixes = ["10.1.0.0/24"]
}
