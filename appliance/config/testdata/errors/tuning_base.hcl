security {
  psk_file = "/etc/sosappliance/psk"
}
site "a" {
  prefixes = ["10.1.0.0/24"]
}
tuning "typo" {
  base = "fasterdata-10G" # ERROR: unknown base profile "fasterdata-10G" # ERROR: Did you mean "fasterdata-10g"?
}
tuning "not-a-string" {
  base = 10 # ERROR: unknown base profile "10"
}
tuning "gone" {
  base = "fasterdata-1g" # ERROR: The built-in profiles are fasterdata-100g, fasterdata-10g, fasterdata-40g.
}
