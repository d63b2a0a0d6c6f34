"""strata client kit: the gRPC stubs (strata.v1) and a conversation helper (strata.client)."""
