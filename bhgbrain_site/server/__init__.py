"""The server shell: ASGI routes, the thin HTTP views, bearer security, /health, the
scheduler and its keeper, static files, worker connection sharing, and the warm-up."""
