"""FusionAudit diagnostics: OAR, RUG, layer recovery and the MANTIS stability sweep."""
