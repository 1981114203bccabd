/* The canzona CLI's subcommands. Each takes the arguments after its name (argv[0] is the
 * subcommand name) and returns the process exit status: 0 success, 1 failure, 2 usage error. */
#ifndef CZ_COMMANDS_H
#define CZ_COMMANDS_H

int cz_cmd_plan(int argc, char **argv);
int cz_cmd_inspect(int argc, char **argv);
int cz_cmd_diff(int argc, char **argv);
int cz_cmd_validate(int argc, char **argv);
int cz_cmd_simulate(int argc, char **argv);
int cz_cmd_render(int argc, char **argv);
int cz_cmd_import_hf(int argc, char **argv);
int cz_cmd_compare(int argc, char **argv);

#endif
