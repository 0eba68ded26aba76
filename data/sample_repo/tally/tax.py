"""Sales tax and VAT on a line's net amount.

A ``TaxRate`` is either exclusive (the usual case for business invoices: tax
is added on top of the net price) or inclusive (consumer prices in the UK
and EU already contain the tax, which then has to be carved out of them).

Tax is computed and rounded per line. Summing unrounded tax over an invoice
and rounding once can differ by a cent from what a point-of-sale system
prints, and customers notice.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from tally.money import Money, percent_text


@dataclass(frozen=True)
class TaxRate:
    """A named tax rate: ``TaxRate("VAT", Decimal("0.20"))`` is 20% VAT on top of the net."""

    name: str
    rate: Decimal
    inclusive: bool = False

    def __post_init__(self) -> None:
        if not Decimal(0) <= self.rate < Decimal(1):
            raise ValueError(f"tax rate out of range: {self.rate}")

    def tax_on(self, net: Money) -> Money:
        """The tax contained in (inclusive) or due on top of (exclusive) ``net``."""
        if self.inclusive:
            return net - net_of_inclusive(net, self.rate)
        return net.percent(self.rate)

    def gross_of(self, net: Money) -> Money:
        """What the customer pays for a line whose net amount is ``net``."""
        if self.inclusive:
            return net
        return net + self.tax_on(net)

    @property
    def label(self) -> str:
        suffix = " incl." if self.inclusive else ""
        return f"{self.name} {percent_text(self.rate)}{suffix}"


def net_of_inclusive(gross: Money, rate: Decimal) -> Money:
    """The part of a tax-inclusive ``gross`` that is not tax.

    >>> str(net_of_inclusive(Money("12.00", "GBP"), Decimal("0.20")))
    'GBP 10.00'
    """
    return Money(gross.amount / (1 + rate), gross.currency)


def parse_rate(text: str) -> Decimal:
    """Read a rate written as ``"19%"``, ``"7.5 %"`` or ``"0.19"`` into a fraction."""
    cleaned = text.strip().replace(" ", "")
    try:
        value = Decimal(cleaned[:-1]) / 100 if cleaned.endswith("%") else Decimal(cleaned)
    except InvalidOperation:
        raise ValueError(f"not a tax rate: {text!r}") from None
    if not Decimal(0) <= value < Decimal(1):
        raise ValueError(f"tax rate out of range: {text!r}")
    return value


ZERO_RATED = TaxRate("Zero-rated", Decimal(0))
VAT_UK = TaxRate("VAT", Decimal("0.20"))
VAT_UK_REDUCED = TaxRate("VAT", Decimal("0.05"))
VAT_DE = TaxRate("MwSt", Decimal("0.19"))
VAT_DE_REDUCED = TaxRate("MwSt", Decimal("0.07"))
GST_AU = TaxRate("GST", Decimal("0.10"), inclusive=True)

BY_REGION = {
    "UK": VAT_UK,
    "DE": VAT_DE,
    "AU": GST_AU,
}


def rate_for_region(region: str) -> TaxRate:
    """The standard rate of a region code, or ``ZERO_RATED`` for unknown regions."""
    return BY_REGION.get(region.upper(), ZERO_RATED)
