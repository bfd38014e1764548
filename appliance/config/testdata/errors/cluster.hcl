controller {
  node   = "ctl-a"
  listen = "127.0.0.1:6653"
}
controller { # ERROR: Duplicate controller node "ctl-a"
  node = "ctl-a"
}
cluster {
  etcd      = ["https://127.0.0.1:2379", "ftp://127.0.0.1:2380", "https://127.0.0.1:2379"] # ERROR: scheme "ftp" # ERROR: lists "https://127.0.0.1:2379" twice
  prefix    = "sos" # ERROR: must start and end with /
  lease_ttl = "1500ms" # ERROR: whole seconds between 2s and 1h
  generation_base = -1 # ERROR: generation_base must be between 0 and 4611686018427387904
  tls { # ERROR: Missing required argument
    ca_file   = "ca.pem" # ERROR: cluster tls ca_file must be an absolute path
    cert_file = "/etc/sosappliance/etcd-client.pem"
  }
}
cluster { # ERROR: Duplicate cluster block
  etcd = []
}
security {
  psk_file = "/etc/sosappliance/psk"
}
site "a" {
  prefixes = ["10.1.0.0/24"]
}
