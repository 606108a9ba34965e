"""Every size threshold of mlmix in one place: which algorithm or representation a chain of N states
gets, and how far exact enumerations go. Each line says why the number is what it is.

Memory is checked separately, against ``--max-memory`` (:func:`mlmix.validation.check_memory`): a size
below a threshold here still needs the memory its algorithm estimates. ``Chain`` asks this module (through
:mod:`mlmix.theory.kernels.representation` and the chain room); nothing else hard-codes a state count.
"""

# ---------------------------------------------------------------- chains: dense algorithms
#: Dense (accurate) chain algorithms up to this many states: a dense N x N float64 matrix is 128 MiB at
#: 4096 and its GTH elimination (N^3/3 flops) a few seconds.
DENSE_LIMIT = 4096
#: Non-reversible stationary laws by dense GTH up to this many states (512 MiB, the one O(N^3) step
#: whose entrywise accuracy the Krylov route cannot match without a certificate).
DENSE_STATIONARY_LIMIT = 8192
#: Dense spectral algorithms (LDL^T of the Laplacian form) up to this many states; Lanczos above.
DENSE_SPECTRAL_LIMIT = 4096
#: The largest eigenvalue of the graded inverse by LAPACK eigh up to this size (O(N^3) with a large
#: constant: about 10 s at 2500 states); Lanczos on the factor above.
EIGH_LIMIT = 2500
#: Eigenvalues of P (non-reversible: complex, with condition numbers) densely up to this many states.
DENSE_SPECTRUM_LIMIT = 4096
#: Absorbing-chain quantities (fundamental matrix, absorption probabilities) by one dense GTH
#: elimination of up to this many transient states.
ABSORBING_LIMIT = 4096
#: Hitting problems with up to this many unknown states are solved by dense GTH elimination.
DENSE_HITTING_LIMIT = 4096
#: The Poisson equation of a sparse chain's asymptotic variance by dense GTH elimination (grounded at the
#: heaviest state) up to this many states: Krylov solvers stall on metastable chains (residual 1e-5 at an
#: additive gap of 1e-9), the subtraction-free factors do not; 128 MiB and a few seconds at 4096.
DENSE_POISSON_LIMIT = 4096
#: Exact worst-start TV distances and t_mix by dense squaring up to this many states (each squaring
#: is one N^3 product: 0.5 s at 4096 on one core).
MIXING_LIMIT = 4096
#: Largest chain whose exact t_mix the reports compute (``mlmix exact``, ``Chain.summary()``): dense
#: squaring costs minutes beyond it; larger chains get certified bounds unless asked.
REPORT_MIXING_LIMIT = 2048
#: The full mean-first-passage matrix (one elimination per target, N^4 work) up to this size.
MFPT_LIMIT = 256
#: Sensitivities of a committor or a mean first passage time (one GTH elimination per state, N^4 work) up to
#: this many states, and of the stationary law (one per target and state, N^5) up to ``PI_SENSITIVITY_LIMIT``.
SENSITIVITY_LIMIT = 256
PI_SENSITIVITY_LIMIT = 32
#: Conductance by enumerating all 2^N - 2 subsets up to this size (2^20 sets, vectorised).
EXACT_CONDUCTANCE_LIMIT = 20

# ---------------------------------------------------------------- chains: representation
#: ``auto`` holds chains up to this many states as CSR matrices and larger ones matrix-free: both
#: answer the same questions with the same certificates (the stationary law entrywise included), and the
#: operator is the faster and lighter one above it; the choice is by speed and memory alone.
SPARSE_AUTO_LIMIT = 2**16

# ---------------------------------------------------------------- enumerations of V^n
#: Largest |V|^n that exact constructions (a joint, a score table) accept unless raised by the caller.
DEFAULT_MAX_STATES = 4**10
#: Largest |V|^n enumerated by the exact local quantities (contexts=None) unless raised by the caller.
EXACT_MAX_STATES = 4**8
#: Largest |V|^n of an exact exponential family (paper P): its Fisher information is a dense d x d
#: matrix over all states, enumerated per parameter.
FAMILY_MAX_STATES = 2**14
#: Largest |V|^n for which paper G's constants are computed exactly (by ``mlmix exact`` and next to the
#: estimates of ``mlmix estimate``): the local quantities stream over fibres, and 160,000 states of a
#: 20-letter MLM frame at n = 4 take seconds.
CONSTANTS_LIMIT = 2**18

# ---------------------------------------------------------------- samplers, hitting, plots
#: Largest state count of the dense systematic-scan kernel (its rows are full: every state is reachable
#: in one sweep).
SYSTEMATIC_LIMIT = 4096
#: Largest number of partial assignments (|V|+1)^n a decoder law is computed over (20^4 alphabets: 194,481).
DECODER_LIMIT = 2_000_000
#: Largest work |V| (|V|+1)^n of the 2^n marginal entropies of a joint behind the entropy curve h(m) of a
#: schedule's expected KL (|V| = 2, n = 15: 2.9e7; |V| = 20, n = 5: 8.2e7).
SUBSET_ENTROPY_LIMIT = 10**8
#: Largest number of ordered blocks (n! / prod k_t!) over which schedule laws are averaged exactly.
ORDER_AVERAGE_LIMIT = 5040
#: Largest transient set whose mean entrance time into the closed class is solved (GTH, O(n^3)).
MEAN_EXIT_LIMIT = 2048
#: Work budget (stored entries times steps, and steps) of the step-by-step hitting probabilities P_x(tau_A
#: <= t); beyond it, binary doubling of the absorbed chain up to DOUBLING_LIMIT unknown states (dense
#: squarings), else the bracket between the budgeted steps and the limit t -> infinity.
HITTING_WORK = 10**8
HITTING_STEPS = 10**5
DOUBLING_LIMIT = 1024
#: Largest chain whose dense powers (distance curve) or full spectrum a figure computes.
PLOT_DENSE_LIMIT = 2048
#: Up to this many states the slow eigenvectors of the metastable sets come from a dense symmetric
#: eigensolver (O(N^3)); the Krylov engine's Lanczos (mlmix.theory.linalg.krylov) above.
DENSE_EIGEN_LIMIT = 4096
#: Coupled pairs of ``mlmix diagnose`` on an assembled kernel are scattered into dense rows of up to this
#: many entries (2^24 float64: 128 MiB); more pairs times states is refused (use fewer pairs or Glauber).
DENSE_ROWS_LIMIT = 2**24
