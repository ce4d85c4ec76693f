"""Where `murmurd install` fetches from when the registry does not hold an artifact."""
