security {
  psk_file = "/etc/sosappliance/psk"
  pks_mode = "0600" # ERROR: Unsupported argument
}
switches "x" { # ERROR: Unsupported block type
}
site "a" {
  prefixes = ["10.1.0.0/24"]
  color    = "blue" # ERROR: Unsupported argument
}
