/* For the sanitizer suite only (tests/sanitize.sh preloads it into mpirun and its ranks;
 * never linked into mpx): a dlclose that unloads nothing. OpenMPI 4.1 and PMIx dlclose
 * their MCA components at MPI_Finalize, before LeakSanitizer looks, so the frames of
 * whatever those components leaked have no module and no name, and no suppression can
 * match them (this OpenMPI has no parameter to keep them loaded). Kept mapped, they are
 * named, and tests/lsan.supp can single out OpenMPI's own allocations. */
int dlclose(void *handle);

int dlclose(void *handle)
{
    (void)handle;
    return 0;
}
