# bash completion for canzona: subcommands, each subcommand's options, the names an option
# takes (strategies, optimizers, ...), and file names for files and positional arguments.
# Installed as share/bash-completion/completions/canzona; or: source planner/cli/canzona.bash
# tests/cli/bash_completion.sh checks that every option 'canzona <command> --help' lists is
# offered, and nothing else.

_canzona_options() { # <command>: the options 'canzona <command> --help' lists
    local settings="--optimizer --unit --dp --alpha --alpha-loads --layerwise-order --tp
        --capacity --solver --time-limit --tpaware-time-limit --seed --ns-steps --ns-coeffs
        --max-precond-dim --precondition-frequency --layout --split-blocks --coop
        --replicate-size --hsdp-compute"
    local sizes="--tp-size --pp-size --dp-size --nodes --gpus-per-node --bucket-size --ep-size
        --etp-size"
    local sim="--overlap-param-gather --overlap-grad-reduce --muon-ns-batch-size --iteration
        --seq-len --micro-batch-size --micro-batches --pass-efficiency --gather-order
        --deferred-updates --early-updates --grad-reduce-in-fp32"
    case $1 in
    plan)
        echo "-m --model -c --cluster -o --output --split
            --allow-oversubscribed-memory --json -q
            --quiet -h --help --calibration $settings $sizes" ;;
    inspect)
        echo "-c --cluster --json -n --top -a --all --startup --read-gbps --fs-gbps -h --help" ;;
    diff) echo "--json -f --force -l --limit -h --help" ;;
    validate) echo "-m --model -c --cluster --calibration --json -l --limit -h --help $sizes" ;;
    import-hf)
        echo "-o --output --name --dtype --tp-size --ep-size --make-vocab-size-divisible-by
            --split-qkv --split-gate-up --per-head -h --help" ;;
    simulate)
        echo "-m --model -c --cluster -p --plan --uneven --muon-tp --gtp-size --calibration
            $sim --json -h --help $settings $sizes" ;;
    render) echo "-o --output --html -w --width -c --cluster --calibration -h --help" ;;
    compare)
        echo "-m --model -c --cluster --repeats --progress --calibration $sim --json -h --help
            $settings $sizes" ;;
    esac
}

_canzona() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
    local commands="plan inspect diff validate import-hf simulate render compare help"
    local cmd="" i words=""
    COMPREPLY=()
    # The subcommand is the first word that is not an option.
    for ((i = 1; i < COMP_CWORD; i++)); do
        case ${COMP_WORDS[i]} in
        -*) ;;
        *) cmd=${COMP_WORDS[i]} && break ;;
        esac
    done
    if [[ -z $cmd ]]; then
        COMPREPLY=($(compgen -W "$commands -h --help -V --version" -- "$cur"))
        return 0
    fi
    if [[ $cmd == help ]]; then
        ((COMP_CWORD == i + 1)) && COMPREPLY=($(compgen -W "${commands% help}" -- "$cur"))
        return 0
    fi
    # The value of the option before the cursor.
    case $prev in
    -m | --model | -c | --cluster | -o | --output | -p | --plan | --calibration)
        compopt -o filenames 2>/dev/null
        COMPREPLY=($(compgen -f -- "$cur"))
        return 0 ;;
    --split) # a folder
        compopt -o filenames 2>/dev/null
        COMPREPLY=($(compgen -d -- "$cur"))
        return 0 ;;
    --optimizer) words="muon soap shampoo adamw" ;;
    --unit) words="time flops numel" ;;
    --dp) words="alpha anchored even joint layerwise tpaware" ;;
    --alpha-loads) words="cost numel" ;;
    --layerwise-order) words="megatron megatron-aug26 pingpong lpt" ;;
    --tp) words="rollback slot single none sc" ;;
    --solver) words="greedy ilp" ;;
    --dtype) words="bf16 fp16 fp32" ;;
    --split-qkv | --split-gate-up) words="yes no" ;;
    --per-head) words="none qkv qkvo" ;;
    --uneven) words="rooted padded" ;;
    --muon-tp) words="duplicated blockwise distributed layer_sharded" ;;
    --bucket-size) words="paper megatron" ;;
    --layout) words="unified split fsdp" ;;
    --hsdp-compute) words="redundant partitioned auto" ;;
    --coop) words="off auto 2 4 8" ;;
    --ns-coeffs) words="jordan cubic polar_express" ;;
    --gather-order) words="forward ready" ;;
    --alpha | --capacity | --time-limit | --tpaware-time-limit | --seed | --ns-steps | \
        --max-precond-dim | --precondition-frequency | --tp-size | --pp-size | --dp-size | \
        --ep-size | --etp-size | --replicate-size | \
        --nodes | --gpus-per-node | --repeats | -w | --width | -n | --top | -l | --limit | \
        --name | --make-vocab-size-divisible-by | --gtp-size | --muon-ns-batch-size | \
        --seq-len | --micro-batch-size | --micro-batches | --pass-efficiency | --read-gbps | \
        --fs-gbps)
        return 0 ;; # a number or a name: nothing to offer
    esac
    if [[ -n $words ]]; then
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
    elif [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$(_canzona_options "$cmd")" -- "$cur"))
    else
        # Positional arguments are files: plans, a config.json.
        compopt -o filenames 2>/dev/null
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
    return 0
}
complete -F _canzona canzona
