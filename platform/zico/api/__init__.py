"""The REST API (DRF): jobs, devices, tenants and members, API tokens, workloads. Mounted at /api/."""
