/* gpumem replay: see replay.c. */
#ifndef GPUMEM_TOOLS_REPLAY_H
#define GPUMEM_TOOLS_REPLAY_H

/* Runs `gpumem replay` with the arguments after the command's name; returns the exit status. */
int replay_main(int argc, char** argv);

#endif
