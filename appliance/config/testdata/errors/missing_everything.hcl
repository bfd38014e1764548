# ERROR: Missing security block # ERROR: No site declared
whitelist "w" { # ERROR: Missing required argument
  server      = "10.2.0.1" # ERROR: is in no site
  server_port = 5201
}
