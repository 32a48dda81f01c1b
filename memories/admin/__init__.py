"""The governance console's memory side: model admins (registered on import), curation
actions, the review-queue and merges pages, curator scope, exports and namespace quotas."""
from memories.admin import model_admins, quotas  # noqa: F401  (registers the model admins)
