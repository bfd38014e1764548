security { # ERROR: Unclosed configuration block
  psk_file = "/etc/sosappliance/psk"
site "a" {
  prefixes = ["10.1.0.0/24"] 
} 
