"""What the user asked for: scenario files (schema, sweeps, --set), the bundled scenarios, neutral device names."""
