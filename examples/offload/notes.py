"""Synchronisation and lifetime hazards of offloading, each written once here and referred to by name.

Code that depends on a note says ``See Note: [Title]``. tests/test_offload_hazards.py has a regression
test for every note the CPU can express and tests/test_offload_cuda.py a CUDA test (skipped without a
GPU) for the rest, each marked ``@pytest.mark.hazard("Title")``; tests/test_hazard_notes.py checks that
every note is defined once here, referred to where it matters, and named by a marked test.

Note: [Event ordering between streams]
    Copies run on side streams (``d2h`` for offload, ``h2d`` for reload) so they overlap compute. Three
    orderings make that correct:

    1. The d2h stream waits for the compute stream before it copies: the tensor may still be being
       written by a kernel the compute stream has queued but not run.
    2. A reload waits for the offload of the same data (its event): the host buffer is only complete
       when the d2h copy has finished.
    3. The compute stream waits for the reload's event before any kernel reads the reloaded tensor.

    Waits are stream-side (``wait_stream``, ``wait_event``), so the host never blocks, except where a
    host thread itself reads the data (Note: [Host step waits for its gradients]).

Note: [Keep the source alive until its copy finishes]
    The caching allocator considers memory free as soon as the last Python reference goes, and hands it
    to the next allocation *on the stream it was allocated on*. If the offloader dropped the device
    tensor right after queuing its d2h copy, the compute stream could overwrite it while the copy still
    reads it. So the offloader keeps the device tensor until the compute stream has waited for the
    copy's event (at the next group's commit), and only then releases it. ``Tensor.record_stream`` is
    the alternative; it defers the reuse until the side stream's pending work at free time is done,
    which works but makes the release point depend on later, unrelated copies.

Note: [Pinned pool reuse]
    Host buffers come from a pool keyed by (numel, dtype), pinned on CUDA so that copies are truly
    asynchronous; pinning per tensor costs a page-locking call each time and fragments host memory. A
    buffer goes back to the pool only when no saved tensor refers to it any more, and it remembers the
    event of its last reload: the next offload into it waits for that event, or it would overwrite data
    a reload is still reading. Within a step, two live blocks never share a buffer.

Note: [Parameters and views of parameters]
    Autograd also saves parameters (a linear layer saves its weight) and views of them (a transposed
    weight, or a tensor-parallel shard that is a view of a larger buffer). They stay on the device while
    the module holds them, so copying them frees nothing and only costs bandwidth, and the copy would
    break identity with the parameter. Megatron-Core marks them "do not offload"; here
    ``is_parameter_like`` excludes them, unless weight offloading is asked for, which then moves bytes
    and saves nothing (what Transformer Engine >= 2.3 makes of ``cpu_offloading_weights``).

Note: [Views share storage]
    Several saved tensors are often views of one storage (attention saves q, k and v, all views of the
    qkv projection's output). Copying each view separately would move and hold the same bytes several
    times, and would hand back contiguous copies whose layout differs from the original's, which can
    change which kernel runs in backward and so the bits of the gradient. A group therefore offloads
    each storage once, as the extent its saved views cover, and rebuilds every view with its own size,
    stride and offset on reload.

Note: [Double-buffered reloads]
    With double buffering, reloads land in two device buffer sets reused by alternate groups instead
    of fresh allocations. The prefetch of group g is issued from the backward commit of group g+1,
    which autograd runs only after every node of g+2 (the previous user of the same buffers) that feeds
    g+2's input; the h2d stream waits for the compute stream, so the copy is also ordered after those
    kernels on the device. A buffer still referenced by a live saved tensor is never reused: the reload
    falls back to a fresh allocation.

Note: [Host step waits for its gradients]
    The hybrid optimizer's host step reads gradients that a d2h copy is still writing. The host thread
    must block on that copy's event (``Event.synchronize``) before the CPU optimizer runs; a stream wait
    would not stop the host. With overlap, each tensor has its own event, so the host steps tensor i
    while tensor i+1 is still in flight. The same wait protects the host masters: each gradient copy is
    queued after a backward that ran after the previous step's parameter copies (Note: [Parameters back
    before the next forward]), so once it is done the previous copy-back has finished reading the
    masters the host is about to overwrite.

Note: [Parameters back before the next forward]
    After the host step, updated parameters are copied back on the h2d stream. The compute stream must
    wait for those copies before the next forward reads the parameters, or it would run on a mix of old
    and new weights.

Note: [Host-resident parameters]
    When the compute device is the CPU, "host" and "device" are the same memory. A parameter that is
    already an fp32 CPU tensor is its own host master copy: copying it into a separate buffer and back
    would only spend memory bandwidth. The hybrid optimizer then steps it in place; parameters in other
    dtypes still get fp32 master copies, so that path runs on CPU too.

Note: [Plan from the first step]
    Fine-grained offloading decides which groups to keep on the device (per module, the last group of
    the forward pass, whose backward comes first; and the share set by ``activation_offload_fraction``)
    from the first training step, in which every eligible group is offloaded, as Megatron-Core's
    warm-up does. A pass without gradients saves nothing, so it does not count as that first step.
"""
