"""Invoices: line items, totals and payments (text output lives in ``tally.render``).

The arithmetic of a line, in order:

1. gross    = unit price x quantity
2. discount = the line's discount applied to the gross (zero without one)
3. net      = gross - discount
4. tax      = the line's tax rate applied to the net, rounded per line
5. total    = net + tax for exclusive rates, net for inclusive ones

An invoice's totals are the sums of its lines' amounts. Payments reduce the
balance due; an early-payment discount under terms like "2/10 net 30" is
offered on the total but never applied automatically.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date

from tally.discounts import Discount
from tally.money import CurrencyMismatch, Money, total
from tally.tax import TaxRate
from tally.terms import NET_30, PaymentTerms, days_overdue


@dataclass(frozen=True)
class LineItem:
    """One line of an invoice."""

    description: str
    unit_price: Money
    quantity: int = 1
    tax_rate: TaxRate | None = None
    discount: Discount | None = None

    def __post_init__(self) -> None:
        if self.quantity < 1:
            raise ValueError(f"quantity must be at least 1, got {self.quantity}")
        if not self.description.strip():
            raise ValueError("a line needs a description")

    @property
    def gross(self) -> Money:
        return self.unit_price * self.quantity

    @property
    def discount_amount(self) -> Money:
        if self.discount is None:
            return Money.zero(self.unit_price.currency)
        return min(self.discount.amount_off(self.gross, self.quantity), self.gross)

    @property
    def net(self) -> Money:
        return self.gross - self.discount_amount

    @property
    def tax(self) -> Money:
        if self.tax_rate is None:
            return Money.zero(self.unit_price.currency)
        return self.tax_rate.tax_on(self.net)

    @property
    def total(self) -> Money:
        if self.tax_rate is None:
            return self.net
        return self.tax_rate.gross_of(self.net)


@dataclass
class Invoice:
    """An invoice to one customer in one currency."""

    number: str
    customer: str
    currency: str = "USD"
    issued: date = field(default_factory=date.today)
    terms: PaymentTerms = NET_30
    lines: list[LineItem] = field(default_factory=list)
    payments: list[Money] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.lines)


    def add_line(
        self,
        description: str,
        unit_price: Money,
        quantity: int = 1,
        tax_rate: TaxRate | None = None,
        discount: Discount | None = None,
    ) -> LineItem:
        """Append a line and return it; its price must be in the invoice's currency."""
        if unit_price.currency != self.currency:
            raise CurrencyMismatch(
                f"line priced in {unit_price.currency} on a {self.currency} invoice"
            )
        line = LineItem(description, unit_price, quantity, tax_rate, discount)
        self.lines.append(line)
        return line

    def record_payment(self, amount: Money) -> Money:
        """Record a payment and return the balance still due."""
        if amount.currency != self.currency:
            raise CurrencyMismatch(f"payment in {amount.currency} on a {self.currency} invoice")
        if amount.amount <= 0:
            raise ValueError("a payment must be positive")
        self.payments.append(amount)
        return self.balance_due


    def _sum(self, amounts: list[Money]) -> Money:
        return total(amounts, self.currency)

    @property
    def subtotal(self) -> Money:
        """The sum of the lines' gross amounts, before discounts and tax."""
        return self._sum([line.gross for line in self.lines])

    @property
    def discount_total(self) -> Money:
        return self._sum([line.discount_amount for line in self.lines])

    @property
    def net_total(self) -> Money:
        return self._sum([line.net for line in self.lines])

    @property
    def tax_total(self) -> Money:
        return self._sum([line.tax for line in self.lines])

    @property
    def total(self) -> Money:
        return self._sum([line.total for line in self.lines])

    @property
    def paid(self) -> Money:
        return self._sum(self.payments)

    @property
    def balance_due(self) -> Money:
        return self.total - self.paid

    def tax_breakdown(self) -> dict[str, Money]:
        """Tax per rate label, in the order the rates first appear."""
        breakdown: dict[str, Money] = {}
        for line in self.lines:
            if line.tax_rate is None:
                continue
            label = line.tax_rate.label
            breakdown[label] = breakdown.get(label, Money.zero(self.currency)) + line.tax
        return breakdown


    @property
    def due_date(self) -> date:
        return self.terms.due_date(self.issued)

    def is_overdue(self, today: date) -> bool:
        return not self.balance_due.is_zero() and today > self.due_date

    def days_overdue(self, today: date) -> int:
        if self.balance_due.is_zero():
            return 0
        return days_overdue(self.due_date, today)

    def early_payment_total(self, paid_on: date) -> Money:
        """What settles the invoice if paid on ``paid_on``, after any early-payment discount."""
        if not self.terms.early_discount_applies(self.issued, paid_on):
            return self.total
        return self.total - self.total.percent(self.terms.early_rate)


    def render(self, width: int = 64) -> str:
        """The invoice as fixed-width text, e.g. for an email body."""
        from tally.render import render_text

        return render_text(self, width)
