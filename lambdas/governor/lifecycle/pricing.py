"""On-demand prices from the AWS Price List API (``pricing:GetProducts``), used when ``use_price_list_api`` is set.

The Price List query endpoint lives in a few regions only; us-east-1 serves every region's prices. Linux,
shared tenancy, no pre-installed software, capacity status "Used": the plain on-demand hourly rate.
"""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from governor.adapters.aws import client
from governor.observability import logger

IAM_ACTIONS = frozenset({"pricing:GetProducts"})
ENDPOINT_REGION = "us-east-1"


def _filters(instance_type: str, region: str) -> list[dict[str, str]]:
    wanted = {
        "instanceType": instance_type,
        "regionCode": region,
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
        "licenseModel": "No License required",
    }
    return [{"Type": "TERM_MATCH", "Field": field, "Value": value} for field, value in wanted.items()]


def parse_product(document: str | dict[str, Any]) -> tuple[float, int | None] | None:
    """The hourly USD price and GPU count in one Price List product document; None when it has no hourly rate."""
    product = json.loads(document) if isinstance(document, str) else document
    attributes = (product.get("product") or {}).get("attributes") or {}
    gpus: int | None = None
    raw_gpus = attributes.get("gpu")
    if isinstance(raw_gpus, str | int) and str(raw_gpus).isdigit():
        gpus = int(raw_gpus)
    for term in ((product.get("terms") or {}).get("OnDemand") or {}).values():
        for dimension in (term.get("priceDimensions") or {}).values():
            if dimension.get("unit") not in ("Hrs", "Hours"):
                continue
            try:
                usd = float(str((dimension.get("pricePerUnit") or {}).get("USD")))
            except ValueError:
                continue
            if usd > 0:
                return usd, gpus
    return None


class PriceListPrices:
    """Implements ``domain.costs.OnDemandPrices``; one GetProducts call per instance type and region, cached."""

    def __init__(self, pricing: Any = None) -> None:
        self._pricing = pricing or client("pricing", ENDPOINT_REGION)
        self._cache: dict[tuple[str, str], tuple[float, int | None] | None] = {}
        self.calls = 0

    def on_demand(self, instance_type: str, region: str) -> tuple[float, int | None] | None:
        """None when the API has no such product or cannot be reached: callers fall back to the policy's table."""
        key = (instance_type, region)
        if key in self._cache:
            return self._cache[key]
        found: tuple[float, int | None] | None = None
        try:
            self.calls += 1
            response = self._pricing.get_products(
                ServiceCode="AmazonEC2", Filters=_filters(instance_type, region), FormatVersion="aws_v1", MaxResults=10
            )
            for document in response.get("PriceList", []):
                found = parse_product(document)
                if found is not None:
                    break
        except (ClientError, BotoCoreError) as error:
            logger.warning("price list unavailable; using the policy's price table", extra={"error": str(error)})
            return None
        self._cache[key] = found
        return found
