controller {
  node = "ctl-a"
}
cluster {
  etcd = ["http://127.0.0.1:2379"] # ERROR: is plain http, but the cluster has a tls block
  tls {
    ca_file   = "/etc/sosappliance/etcd-ca.pem"
    cert_file = "/etc/sosappliance/etcd-client.pem"
    key_file  = "/etc/sosappliance/etcd-client-key.pem"
  }
}
security {
  psk_file = "/etc/sosappliance/psk"
}
site "a" {
  prefixes = ["10.1.0.0/24"]
}
