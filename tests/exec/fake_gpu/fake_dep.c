/* Stands for an NVIDIA library the GPU plugin needs (test_gpu_loader.c). */
int cz_fake_dep_value(void);
int cz_fake_dep_value(void)
{
    return 42;
}
