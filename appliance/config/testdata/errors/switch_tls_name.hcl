controller {
  node   = "ctl"
  listen = "192.0.2.1:6653"
  tls {
    cert_file = "/etc/sosappliance/controller-cert.pem"
    key_file  = "/etc/sosappliance/controller-privkey.pem"
    ca_file   = "/etc/sosappliance/switchca-cacert.pem"
  }
}
security {
  psk_file = "/etc/sosappliance/psk"
}
site "a" {
  prefixes = ["10.1.0.0/24"]
  switch "plain" {
    datapath_id = "00:00:00:00:00:00:00:01"
    tls         = false
    tls_name    = "plain" # ERROR: has tls_name but tls = false
  }
  switch "dialed" {
    datapath_id = "00:00:00:00:00:00:00:02"
    connect     = "tcp:192.0.2.12:6653"
    tls_name    = "dialed" # ERROR: tls_name is for switches that connect to the controller over TLS
  }
  switch "blank" {
    datapath_id = "00:00:00:00:00:00:00:03"
    tls_name    = " blank" # ERROR: empty, or with spaces around it
  }
}
