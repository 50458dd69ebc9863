/* gpumem summary (summary.c): a trace's figures as a person reads them. */
#ifndef GPUMEM_TOOLS_SUMMARY_H
#define GPUMEM_TOOLS_SUMMARY_H

/* `gpumem summary` with the arguments after the command's name: its exit status. */
int summary_main(int argc, char** argv);

#endif
