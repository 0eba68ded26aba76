"""The inverse what-if: the service costs under which the articles' figures would hold.

The what-if lab goes from costs to outcomes. This goes back: given what the articles report
(the sprint's TTFT nearly 45% lower, agent loops 40% faster end to end, the integrators'
30-40% with WebSocket mode), which network round trip, service hops, classifier costs and
billing hop make labkit's cost model give those outcomes on the default rollout at 1,000
tokens/s? No source says what the integrators measured against: labkit reads it as the HTTP
API after the sprint, and the fit file gives the other reading (the API before it) beside it.

The figures are not one workload's: the fit uses OpenAI's two and holds the integrators'
three out, reporting what it predicts for them. The modules, in the order a fit runs:

- ``inputs``: the fit file read and checked (figures, readings, priors, bounds, fixed inputs);
- ``outcomes``: a setting of the unknowns priced by the cost model into the outcomes;
- ``solver``: bounded least squares;
- ``result``: the fit, its residuals and what the figures cannot pin down;
- ``report``, ``profile_file`` and ``plot``: the fit as ``labkit fit`` prints it, the profile it
  writes, and fits' residuals side by side as a figure;
- ``laptop`` and ``check``: the fitted delays priced on another machine (a learner's laptop, as
  a run there measures it), and a run of the fitted profile set beside that prediction.

    >>> fit = fit_articles()
    >>> list(fit.residuals["role"])
    ['fitted', 'fitted', 'held out', 'held out', 'held out']
"""

from labkit.analysis.fit.inputs import FIGURE_SETS, FIT_FILE, FitInputError, FitInputs, read_inputs
from labkit.analysis.fit.profile_file import profile_text
from labkit.analysis.fit.report import format_fit
from labkit.analysis.fit.result import ArticleFit, fit_articles

__all__ = [
    "FIGURE_SETS",
    "FIT_FILE",
    "ArticleFit",
    "FitInputError",
    "FitInputs",
    "fit_articles",
    "format_fit",
    "profile_text",
    "read_inputs",
]
