/* The op registry: every numeric operation is defined once, here, as
 *   - a shape/dtype rule (`infer`): checks inputs, fills output shapes and
 *     the scratch size; raises a Python exception (GIL held) on a mismatch;
 *   - a forward kernel (`forward`): plain C over preallocated outputs and
 *     scratch, called without the GIL, returns a PR_* code;
 *   - a gradient rule (`gradient`): builds input gradients by calling other
 *     registered ops through pr_call, so the backward pass works eagerly and,
 *     on symbolic tensors, appends graph nodes.
 * Eager calls and the traced executor both run these entries.
 */
#ifndef PR_OPS_H
#define PR_OPS_H

#include "tensor.h"
#include "symdim.h"
#include "kernels/cpu.h"

#define PR_MAX_INPUTS 8
#define PR_MAX_OUTPUTS 4
#define PR_ATTR_BYTES 256
/* An attribute buffer: aligned for any attribute struct (int64, double, pr_ints). */
#define PR_ATTR_ALIGN _Alignas(16)

/* ---- attributes ----------------------------------------------------------
 * Each op's attributes are a plain C struct of at most PR_ATTR_BYTES bytes,
 * described by a table of pr_attr_spec so that Python keyword arguments are
 * parsed generically.  Gradient rules fill the struct directly. */
typedef enum { PR_ATTR_INT, PR_ATTR_FLOAT, PR_ATTR_BOOL, PR_ATTR_INTS } pr_attr_kind;

typedef struct {
    int n;
    int64_t v[PR_MAX_DIMS];
} pr_ints; /* a short list of ints: axes, shapes, strides */

typedef struct {
    const char *name;
    pr_attr_kind kind;
    size_t offset;   /* offsetof(attrs struct, field) */
    int required;
    double dflt;     /* default for INT/FLOAT/BOOL; INTS default to n = 0 */
} pr_attr_spec;

/* ---- op flags ------------------------------------------------------------ */
enum {
    PR_OP_STATEFUL = 1, /* has effects beyond its outputs: never removed from a graph */
    PR_OP_RANDOM = 2,   /* draws from an RNG state input (implies STATEFUL) */
    PR_OP_ELEMENTWISE = 4, /* output element i reads only element i of every input of the
                            * output's shape (others broadcast): the output may share the
                            * buffer of such an input (in-place), and chains may be fused */
    PR_OP_COLLECTIVE = 8,  /* communicates with other processes (MPI): every rank runs it
                            * exactly once per call, so the jit never times it by rerunning */
    PR_OP_NO_GRADIENT_RULE = 16, /* a backward op whose own gradient is not implemented: it is
                                  * recorded on tapes, and a gradient that must pass through it
                                  * (a second derivative) raises NotImplementedError naming it,
                                  * instead of silently giving None */
    PR_OP_BF16 = 32,       /* takes bfloat16 inputs itself, any mix with float32; other ops
                            * take bfloat16 only in the inputs of their `bf16_inputs` mask */
    PR_OP_INT = 64,        /* integer arithmetic (add, subtract, multiply, maximum,
                            * minimum, sum): pr_call
                            * promotes integer inputs as NumPy does (int32 with int64 is
                            * int64, uint8 with int32 is int32, a Python int takes the
                            * tensor's dtype) and casts them to float32 next to a float
                            * input, so the kernel sees one dtype */
};

typedef struct pr_op pr_op;

typedef int (*pr_infer_fn)(const pr_op *op, const pr_view *in, int n_in, const void *attrs,
                           pr_view *out, size_t *scratch_bytes);
typedef int (*pr_forward_fn)(const pr_view *in, int n_in, pr_view *out, const void *attrs,
                             void *scratch);
/* in/out: the call's tensors (pr_Tensor*, real or symbolic).  gout[i] is the
 * gradient of output i or NULL (no gradient flows there).  needs[i] says
 * whether input i wants a gradient.  Fill gin[i] with a new reference or
 * leave it NULL.  Return 0, or -1 with a Python exception set. */
/* Optional: floating-point operations of one call (a multiply-add counts 2). */
typedef double (*pr_flops_fn)(const pr_view *in, int n_in, const pr_view *out, const void *attrs);
/* ---- kernel variants ------------------------------------------------------
 * An op with several kernels lists them in `variants`, in priority order; the
 * last entry is its portable reference kernel (the op's `forward`: always
 * supported, the oracle the others are tested against).  Eager calls and the
 * executor run the first variant that is usable for the call: its CPU
 * features are present (kernels/cpu.h), PYRESNET_KERNELS=reference is not
 * set, and its `supports` accepts the shapes.  jit_compile times only the
 * usable ones.  Variants named "*_bf16" take the calls with a bfloat16
 * operand (and only those), the others float32 calls. */
typedef struct {
    const char *name;
    unsigned cpu; /* required pr_cpu_features() bits */
    /* Whether the kernel runs these (real) shapes and attributes; NULL: all. */
    int (*supports)(const pr_view *in, int n_in, const pr_view *out, const void *attrs);
    /* Scratch bytes; NULL: what the shape rule asked for.  Called only for a
     * usable variant (it may be compiled for the variant's instruction set). */
    size_t (*scratch)(const pr_view *in, int n_in, const pr_view *out, const void *attrs);
    pr_forward_fn run;
} pr_variant;

/* Optional: while tracing, the value of output 0 (a scalar size) as a
 * dimension known from the input shapes (pyresnet.ops.shape's sizes). */
typedef int64_t (*pr_known_fn)(const pr_view *in, int n_in, const void *attrs);
typedef int (*pr_gradient_fn)(PyObject *const *in, PyObject *const *out, const void *attrs,
                              PyObject *const *gout, const int *needs, PyObject **gin);

struct pr_op {
    const char *name;
    int n_in;             /* fixed arity */
    int n_out;            /* 0 for ops that only mutate inputs */
    unsigned mutates;     /* bitmask of inputs written in place (variables, RNG state) */
    unsigned flags;
    const pr_attr_spec *attrs; /* NULL-name-terminated, or NULL */
    size_t attr_size;
    pr_infer_fn infer;
    pr_forward_fn forward;
    pr_gradient_fn gradient; /* NULL: not differentiable (grads stop here) */
    const char *doc;
    pr_flops_fn flops;         /* NULL: one per output element */
    const pr_variant *variants; /* NULL: only `forward` */
    int n_variants;
    pr_known_fn known;         /* NULL: output values unknown while tracing */
    /* Inputs (bitmask) an op without PR_OP_BF16 takes as bfloat16 when all
     * of them are bfloat16 (Keras's mixed_bfloat16 activations: batch norm,
     * ReLU, the residual add), computing in float32 inside and writing
     * bfloat16 where the shape rule says.  pr_call casts every other
     * bfloat16 input to float32, and those of the mask too when they mix
     * dtypes (as NumPy promotes); the cast is an op call, recorded as any. */
    unsigned bf16_inputs;
    /* Inputs (bitmask) whose buffer output 0 may take over in a compiled
     * graph when the input dies there and has output 0's dtype and shape:
     * the kernel reads element i of each of them before it writes element i
     * of output 0 (PR_OP_ELEMENTWISE ops: every input; batch norm's
     * backward: dy and x). */
    unsigned inplace_inputs;
    /* Fusible under jit_compile: the op's instruction in the fused
     * elementwise kernel (kernels/fused.h PR_FI_*; 0, PR_FI_NONE: not
     * fusible), and for PR_FI_UNARY its unary kind (kernels/elementwise.h). */
    unsigned char fuse, fuse_arg;
};

/* Registration: each op is a `const pr_op pr_op_<name>` of its family's
 * ops_<family>.c, listed in op_list.h; module.c hands the whole list to
 * pr_ops_init (NULL-terminated). */
const pr_op *pr_op_lookup(const char *name); /* NULL for an unknown (or NULL) name */
int pr_ops_init(PyObject *module, const pr_op *const *ops);

/* ---- calling ops ----------------------------------------------------------
 * Inputs are Tensors, NumPy arrays or numbers (converted).  On return,
 * outputs[0..n_out) hold new references.  Eager inputs run the kernel now
 * (GIL released) and are recorded on active GradientTapes; if any input is
 * symbolic the call is appended to the graph being traced instead.
 * `attrs` may be NULL for "all defaults".  Return 0, or -1 with an exception. */
int pr_call(const pr_op *op, PyObject *const *inputs, int n_in, const void *attrs,
            PyObject **outputs);
/* Single-output convenience: returns a new reference, or NULL. */
PyObject *pr_call1(const pr_op *op, PyObject *const *inputs, int n_in, const void *attrs);

/* Fill `attrs` with the op's defaults, then the keyword arguments in `kwargs`
 * (may be NULL).  Unknown names raise TypeError. */
int pr_parse_attrs(const pr_op *op, PyObject *kwargs, void *attrs);

/* Run an op's shape rule, prefixing any error with the op name. */
int pr_infer(const pr_op *op, const pr_view *in, int n_in, const void *attrs, pr_view *out,
             size_t *scratch_bytes);
/* Variant v of op (-1 for an op without variants: its `forward`). */
int pr_variant_usable(const pr_op *op, int v, const pr_view *in, int n_in, const pr_view *out,
                      const void *attrs);
/* The first usable variant: what eager calls and plans run (-1: no variants). */
int pr_variant_default(const pr_op *op, const pr_view *in, int n_in, const pr_view *out,
                       const void *attrs);
size_t pr_variant_scratch(const pr_op *op, int v, const pr_view *in, int n_in,
                          const pr_view *out, const void *attrs, size_t infer_scratch);
/* Run op's kernel: variant v (-1: the op's `forward`) on real views, with
 * `scratch` as pr_variant_scratch sized it; nothing when every output is
 * empty and the op writes no input.  The one way a kernel runs: eager calls
 * (pr_run_forward), the executor and the input pipeline.  A PR_* code; no
 * GIL needed. */
int pr_op_run(const pr_op *op, int v, const pr_view *in, int n_in, pr_view *out,
              const void *attrs, void *scratch);
/* The name of variant v, or NULL for an op without variants. */
const char *pr_variant_name(const pr_op *op, int v);

/* Run variant v's kernel on real views with the GIL released; turn a kernel
 * error code into a Python exception (GIL held again on return). */
int pr_run_forward(const pr_op *op, int v, const pr_view *in, int n_in, pr_view *out,
                   const void *attrs, size_t scratch_bytes);

/* Turn a kernel's PR_* code into the Python exception eager calls raise
 * (GIL held).  Returns -1 for an error code, 0 for PR_OK. */
int pr_kernel_status(const pr_op *op, int rc);

/* Shape-rule helpers: raise ValueError/TypeError naming the op. */
int pr_expect_dtype(const pr_op *op, const pr_view *in, int i, pr_dtype dtype);
/* The dtype of the inputs in op->bf16_inputs: float32, or bfloat16 when all
 * of them are; TypeError when they differ or are not floating (shape rules
 * of ops with a bfloat16 mask; their outputs take this dtype). */
int pr_activation_dtype(const pr_op *op, const pr_view *in, pr_dtype *dtype);
int pr_expect_ndim(const pr_op *op, const pr_view *in, int i, int ndim);
/* Input i has input j's shape (symbolic dimensions may match). */
int pr_expect_shape_like(const pr_op *op, const pr_view *in, int i, int j);
/* Input i is float32 with input j's shape. */
int pr_expect_like(const pr_op *op, const pr_view *in, int i, int j);
/* Input i is an RNG state: int64 of shape (2,), [seed, counter] (TypeError). */
int pr_expect_rng_state(const pr_op *op, const pr_view *in, int i);
/* The NumPy broadcast of a's and b's shapes into *ndim, shape[PR_MAX_DIMS]
 * (ValueError naming both shapes when they do not broadcast). */
int pr_broadcast_shape(const pr_op *op, const pr_view *a, const pr_view *b, int *ndim,
                       int64_t *shape);
int pr_fail(const pr_op *op, PyObject *exc, const char *fmt, ...);
void pr_set_out(pr_view *out, pr_dtype dtype, int ndim, const int64_t *shape);

/* Gradient-rule helper: sum `g` down to `shape` (undo broadcasting;
 * ops_elementwise.c, beside the sum_to_shape op). */
PyObject *pr_sum_to_shape(PyObject *g, const pr_view *shape);

/* ---- hooks: how tracing and taping reach pr_call ---------------------------
 * csrc/ is built in floors, each file calling only its own floor and those
 * below (docs/architecture.md; tests/test_layering.py checks it): ops.c sits
 * below the tapes (autodiff.c) and the tracer (graph.c), yet every op call
 * must be taped and, while a function is traced, traced.  So those floors
 * fill this table when the module starts (pr_autodiff_init, pr_graph_init)
 * and ops.c calls down through it.  Unset entries mean: no tape, no trace. */
typedef struct {
    /* Whether this thread is tracing a graph. */
    int (*tracing_active)(void);
    /* Append a call to the graph being traced and return symbolic outputs
     * (the contract of pr_call). */
    int (*trace_call)(const pr_op *op, PyObject *const *inputs, int n_in, const void *attrs,
                      PyObject **outputs);
    int (*trace_known_value)(PyObject *t, int64_t *out);
    PyObject *(*trace_size_arith)(int kind, PyObject *a, PyObject *b);
    int (*trace_gradient_scope)(PyObject *forward_output);
    void (*trace_restore_scope)(int scope);
    pr_symtab *(*symtab_of)(PyObject *sym);
    /* Record an eager or traced call on every active tape that watches one
     * of its inputs. */
    int (*tape_record)(const pr_op *op, PyObject *const *inputs, int n_in, const void *attrs,
                       PyObject *const *outputs, int n_out);
} pr_hook_table;
extern pr_hook_table pr_hooks;

/* The hooks, called safely (each does nothing when its entry is unset): */
int pr_tape_record(const pr_op *op, PyObject *const *inputs, int n_in, const void *attrs,
                   PyObject *const *outputs, int n_out);
/* While tracing: the dimension a scalar symbolic tensor is known to hold
 * (an op's `known` rule), 1 and *out; 0 if none. */
int pr_trace_known_value(PyObject *t, int64_t *out);
/* While tracing: a op b ('+', '-', '*', '/' for floor division) on sizes
 * from pyresnet.ops.shape and Python ints, as a new size (a "size" node
 * holding the expression).  NULL without an exception when a or b is no such
 * size (the caller falls back to tensor arithmetic); NULL with one on error. */
PyObject *pr_trace_size_arith(int kind, PyObject *a, PyObject *b);
/* Whether this thread is tracing a graph. */
int pr_tracing_active(void);
/* While tracing, nodes record the graph's current name scope (an index the
 * Python tracer keeps, pyresnet.name_scope).  Backward nodes made by a tape
 * entry get the scope of the forward node that produced `forward_output`
 * with PR_SCOPE_GRADIENT set (Python names it "gradient_tape/<scope>").
 * Returns the scope to restore, or -1 (not tracing, or not a node's output
 * of the graph being traced: nothing changed). */
#define PR_SCOPE_GRADIENT (1 << 30)
int pr_trace_gradient_scope(PyObject *forward_output);
void pr_trace_restore_scope(int scope);
/* The symbol table of the graph a symbolic tensor's `sym` names (NULL if none). */
pr_symtab *pr_symtab_of(PyObject *sym);

/* Attributes of the batch-norm training backward ops (ops_nn.c): epsilon,
 * dx_dtype (op_attrs.h, pr_bn_attrs). */
extern const pr_attr_spec pr_bn_backward_attrs[];

#endif
