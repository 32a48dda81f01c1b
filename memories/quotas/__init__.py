"""Per-namespace quotas: limits (config + NamespaceQuota rows), usage (counts the database keeps),
plan (what must go), admission (the check the write funnel makes before an insert), selectors."""
