"""The output models: repair's (it succeeds only on a shared index, so the session tests cannot
call it) against a real result, and the REST OpenAPI schema documenting the same models as MCP."""
from __future__ import annotations

import jsonschema
import pytest

from bhgbrain_site import registry
from bhgbrain_site.core.calls import CallContext
from tests.conftest import remember

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_repair_result_matches_its_output_schema(qdrant) -> None:  # noqa: ANN001
    remember("Repair output: the build cache lives on S3")
    result = registry.call_tool("repair", {"dry_run": True}, CallContext(actor="test"))
    schema = registry.get_operation("repair").output_schema()
    jsonschema.validate(result, schema, cls=jsonschema.Draft202012Validator)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**result, "surprise": 1}, schema, cls=jsonschema.Draft202012Validator)


def test_rest_documents_the_tools_output_models() -> None:
    from drf_spectacular.generators import SchemaGenerator

    openapi = SchemaGenerator().get_schema(request=None, public=True)
    components = openapi["components"]["schemas"]
    remember_201 = openapi["paths"]["/api/memories/"]["post"]["responses"]["201"]["content"]["application/json"]["schema"]
    assert remember_201 == {"$ref": "#/components/schemas/Remembered"}
    for tool, component in (("remember", "Remembered"), ("search", "SearchResults"), ("forget", "Forgotten")):
        mcp = registry.get_operation(tool).output_schema()
        assert set(components[component]["properties"]) == set(mcp["properties"]), tool
        assert components[component]["required"] == mcp["required"], tool
