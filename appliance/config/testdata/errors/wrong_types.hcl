security {
  psk_file   = ["/etc/psk"] # ERROR: psk_file must be a string
  encryption = "rot13" # ERROR: encryption must be
}
site "a" {
  prefixes = "10.1.0.0/24" # ERROR: prefixes must be a list of strings
}
whitelist "w" {
  clients      = ["10.1.0.0/24"]
  server       = "10.2.0.1"
  server_port  = 70000 # ERROR: server_port must be between 1 and 65535
  streams      = 2.5 # ERROR: streams must be a whole number
  chunk_size   = "60 parsecs" # ERROR: chunk_size: "60 parsecs" is not a byte size
  queue_length = true # ERROR: queue_length must be a whole number
}
limits {
  stall_timeout = "soon" # ERROR: stall_timeout: "soon" is not a positive duration
}
